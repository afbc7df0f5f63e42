//! Kubernetes resource quantities ("500m", "128Mi", "1.5", "2e3"), parsed
//! exactly (no floating point) into milli-units or whole units, rounding up
//! as the API's `MilliValue()` and `Value()` do.

/// A parse failure, with the text that failed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("quantity {0:?} is not a valid resource quantity")]
pub struct QuantityError(pub String);

/// The value times 1000, rounded up (the API's `MilliValue`).
pub fn milli_value(s: &str) -> Result<i64, QuantityError> {
    scaled(s, 3)
}

/// The value, rounded up (the API's `Value`).
pub fn value(s: &str) -> Result<i64, QuantityError> {
    scaled(s, 0)
}

/// value × 10^`exp10`, rounded up toward +infinity, saturating at i64.
fn scaled(s: &str, exp10: i32) -> Result<i64, QuantityError> {
    let err = || QuantityError(s.to_string());
    let t = s.trim();
    if t.is_empty() || t != s {
        return Err(err());
    }
    let (neg, body) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(err());
    }
    // (base, exponent): 10^e or 2^e.
    let (binary, exp): (bool, i32) = match suffix {
        "" => (false, 0),
        "n" => (false, -9),
        "u" => (false, -6),
        "m" => (false, -3),
        "k" => (false, 3),
        "M" => (false, 6),
        "G" => (false, 9),
        "T" => (false, 12),
        "P" => (false, 15),
        "E" => (false, 18),
        "Ki" => (true, 10),
        "Mi" => (true, 20),
        "Gi" => (true, 30),
        "Ti" => (true, 40),
        "Pi" => (true, 50),
        "Ei" => (true, 60),
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| err())?;
            if !(-30..=30).contains(&e) {
                return Err(err());
            }
            (false, e)
        }
        _ => return Err(err()),
    };
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 30 {
        return Err(err());
    }
    let mantissa: i128 = digits.parse().map_err(|_| err())?;
    // value = mantissa × 10^(-frac) × base^exp × 10^exp10
    let mut num_: i128 = mantissa;
    let mut den: i128 = 1;
    let mut pow10 = exp10 - frac_part.len() as i32;
    if binary {
        num_ = num_.checked_mul(1i128 << exp).ok_or_else(err)?;
    } else {
        pow10 += exp;
    }
    if pow10 >= 0 {
        for _ in 0..pow10 {
            num_ = num_.checked_mul(10).ok_or_else(err)?;
        }
    } else {
        for _ in 0..(-pow10) {
            den = den.checked_mul(10).ok_or_else(err)?;
        }
    }
    let mut v = num_ / den;
    if num_ % den != 0 && !neg {
        v += 1;
    }
    let v = if neg { -v } else { v };
    Ok(v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_kubectl_accepts() {
        assert_eq!(milli_value("500m"), Ok(500));
        assert_eq!(milli_value("1"), Ok(1000));
        assert_eq!(milli_value("1.5"), Ok(1500));
        assert_eq!(milli_value("0.1"), Ok(100));
        assert_eq!(milli_value("1u"), Ok(1), "rounds up");
        assert_eq!(value("128Mi"), Ok(128 << 20));
        assert_eq!(value("1Gi"), Ok(1 << 30));
        assert_eq!(value("1G"), Ok(1_000_000_000));
        assert_eq!(value("2e3"), Ok(2000));
        assert_eq!(value("1.5Ki"), Ok(1536));
        assert_eq!(value("100k"), Ok(100_000));
        assert_eq!(value("0"), Ok(0));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "x", "1x", "1.2.3", "Mi", " 1", "1 ", "--1", "1e99"] {
            assert!(value(bad).is_err(), "{bad:?}");
        }
    }
}
