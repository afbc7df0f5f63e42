//! Image references (from CRI requests and Pod specs): parse, and what
//! parses prints back to a reference that parses to the same thing.
#![no_main]
use husk::reference::Reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Reference::parse_name_only(s);
    let _ = husk::reference::validate_digest(s);
    if let Ok(r) = Reference::parse(s) {
        let again = Reference::parse(&r.to_string()).expect("a printed reference parses");
        assert_eq!(again.to_string(), r.to_string());
        let _ = (r.name(), r.tagged(), r.object());
    }
});
