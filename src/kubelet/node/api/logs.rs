//! `/containerLogs/NS/POD/CONTAINER`: a container's CRI log file read back
//! as the kubelet's log reader does. Records (`<time> <stream> <P|F>
//! <text>`) are joined into lines (a partial record continues in the
//! next record of its stream), and the options of `kubectl logs` apply:
//! `tailLines`, `timestamps` (each line prefixed with its RFC 3339 time),
//! `sinceSeconds`/`sinceTime`, `limitBytes`, `previous` (the last
//! terminated instance) and `follow` (new lines as they are written,
//! until the container has stopped and everything is sent). A line the
//! container never ended (its last, written as partial records) is sent
//! as it is, without a newline. The body is
//! sent chunked, as it is produced.

use super::{container_id, refuse, Request};
use crate::kubelet::kit::log_reader::{Options, Reader};
use crate::kubelet::lifecycle::Ctx;
use k8s_openapi::jiff::Timestamp;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt};

/// The `kubectl logs` options of a request.
fn options(req: &Request) -> Result<Options, String> {
    let num = |k: &str| -> Result<Option<i64>, String> {
        req.get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("{k}: invalid number {v:?}"))
            })
            .transpose()
    };
    let since = match (num("sinceSeconds")?, req.get("sinceTime")) {
        (Some(s), _) => Some(
            Timestamp::now()
                .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s.max(0)))
                .unwrap_or(Timestamp::UNIX_EPOCH),
        ),
        (None, Some(t)) => Some(
            t.parse::<Timestamp>()
                .map_err(|e| format!("sinceTime: {e}"))?,
        ),
        _ => None,
    };
    Ok(Options {
        tail: num("tailLines")?.map(|n| n.max(0) as usize),
        timestamps: req.flag("timestamps"),
        since,
        limit_bytes: num("limitBytes")?.filter(|n| *n > 0).map(|n| n as usize),
    })
}

async fn chunk<S: AsyncWrite + Unpin>(s: &mut S, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    s.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    s.write_all(data).await?;
    s.write_all(b"\r\n").await?;
    s.flush().await
}

async fn running(ctx: &Ctx, id: &str) -> bool {
    ctx.cri
        .container_status(id)
        .await
        .is_ok_and(|st| st.state == crate::api::cri::ContainerState::ContainerRunning as i32)
}

pub async fn serve<S: AsyncWrite + Unpin>(s: &mut S, ctx: &Ctx, req: &Request) -> io::Result<()> {
    let previous = req.get("previous").is_some_and(|v| v == "true" || v == "1");
    let (_, id) = match container_id(ctx, &req.segments, previous) {
        Ok(x) => x,
        Err((code, msg)) => return refuse(s, code, &msg).await,
    };
    let opts = match options(req) {
        Ok(o) => o,
        Err(m) => return refuse(s, 400, &m).await,
    };
    let follow = req.get("follow").is_some_and(|v| v == "true" || v == "1");
    let path = match ctx.cri.container_status(&id).await {
        Ok(st) => st.log_path,
        Err(e) => return refuse(s, 404, &format!("container {id}: {}", e.status.message())).await,
    };
    let mut f = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => return refuse(s, 404, &format!("log file {path}: {e}")).await,
    };
    s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await?;
    let mut reader = Reader::default();
    let mut left = opts.limit_bytes.unwrap_or(usize::MAX);
    fn take(left: &mut usize, lines: Vec<Vec<u8>>) -> Vec<u8> {
        let mut out: Vec<u8> = lines.concat();
        out.truncate(*left);
        *left -= out.len();
        out
    }
    // The file is read a block at a time (a container's log can be
    // gigabytes between rotations): without a tail, each block's lines
    // go out at once; with one, only the last `tail` lines are kept.
    let mut kept: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
    let mut block = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut block).await?;
        let mut lines = if n == 0 {
            if follow {
                break;
            }
            reader.finish(&opts)
        } else {
            reader.lines(&block[..n], &opts)
        };
        match opts.tail {
            Some(t) => {
                kept.extend(lines.drain(..));
                while kept.len() > t {
                    kept.pop_front();
                }
            }
            None if left > 0 => chunk(s, &take(&mut left, lines)).await?,
            None => {}
        }
        if n == 0 {
            break;
        }
    }
    if opts.tail.is_some() {
        chunk(s, &take(&mut left, kept.into_iter().collect())).await?;
    }
    if follow {
        let mut idle = 0u32;
        while left > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut more = Vec::new();
            let pos = f.stream_position().await?;
            if tokio::fs::metadata(&path)
                .await
                .map(|m| m.len())
                .unwrap_or(0)
                < pos
            {
                // Rotated or truncated: read the new file from its start.
                f = tokio::fs::File::open(&path).await?;
            }
            f.read_to_end(&mut more).await?;
            if more.is_empty() {
                idle += 1;
                if idle.is_multiple_of(5) && !running(ctx, &id).await {
                    chunk(s, &take(&mut left, reader.finish(&opts))).await?;
                    break;
                }
                continue;
            }
            idle = 0;
            chunk(s, &take(&mut left, reader.lines(&more, &opts))).await?;
        }
    }
    s.write_all(b"0\r\n\r\n").await?;
    s.flush().await?;
    let _ = s.shutdown().await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LOG: &str = "2026-01-01T00:00:01.000000001Z stdout F one\n\
2026-01-01T00:00:02.5Z stdout P tw\n\
2026-01-01T00:00:02.6Z stderr F err\n\
2026-01-01T00:00:02.7Z stdout F o\n\
2026-01-01T00:00:03Z stdout F three\n";

    #[test]
    fn records_join_into_lines_with_options() {
        let all = Reader::default().lines(LOG.as_bytes(), &Options::default());
        let text: Vec<String> = all
            .iter()
            .map(|l| String::from_utf8_lossy(l).into())
            .collect();
        assert_eq!(text, ["one\n", "err\n", "two\n", "three\n"]);
        let mut r = Reader::default();
        let cut = format!("{LOG}2026-01-01T00:00:04Z stdout P DONE\n");
        assert_eq!(r.lines(cut.as_bytes(), &Options::default()).len(), 4);
        assert_eq!(r.finish(&Options::default()), [b"DONE".to_vec()]);
        assert!(r.finish(&Options::default()).is_empty());
        let ts = Options {
            timestamps: true,
            ..Default::default()
        };
        let first = &Reader::default().lines(LOG.as_bytes(), &ts)[2];
        assert_eq!(
            String::from_utf8_lossy(first),
            "2026-01-01T00:00:02.5Z two\n"
        );
        let since = Options {
            since: Some("2026-01-01T00:00:02.6Z".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(Reader::default().lines(LOG.as_bytes(), &since).len(), 2);
    }

    #[test]
    fn a_record_split_across_reads_waits_for_its_newline() {
        let mut r = Reader::default();
        let (a, b) = LOG.as_bytes().split_at(40);
        let mut got = r.lines(a, &Options::default());
        got.extend(r.lines(b, &Options::default()));
        assert_eq!(got.len(), 4);
        let req = Request::parse("/containerLogs/a/b/c?tailLines=x");
        assert!(options(&req).is_err());
        let req = Request::parse("/containerLogs/a/b/c?tailLines=2&timestamps=true&limitBytes=10");
        let o = options(&req).unwrap();
        assert_eq!(
            (o.tail, o.timestamps, o.limit_bytes),
            (Some(2), true, Some(10))
        );
    }
}
