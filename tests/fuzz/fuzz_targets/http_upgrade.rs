//! The streaming server's HTTP/1.1 request head (the upgrade to SPDY or
//! WebSocket), and the head of a response as the streaming client reads it;
//! the kubelet API's request target (path segments, query) from the same head.
#![no_main]
use husk::streaming::http::{read_request, read_response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    futures::executor::block_on(async {
        let mut input = data;
        if let Ok(head) = read_request(&mut input).await {
            let _ = head.upgrades_to("websocket");
            let _ = head.upgrades_to("SPDY/3.1");
            let _ = head.header_list("Sec-WebSocket-Protocol");
            let _ = head.header("X-Stream-Protocol-Version");
            let req = husk::kubelet::node::api::Request::parse(&head.path);
            assert!(req.segments.iter().all(|s| !s.is_empty()));
            let _ = (req.flag("follow"), req.all("command"));
            let fwd = husk::kubelet::node::api::forward_head(&head, "/x", "127.0.0.1:1");
            assert!(fwd.starts_with(format!("{} /x HTTP/1.1\r\n", head.method).as_bytes()));
        }
        let mut input = data;
        let _ = read_response(&mut input).await;
    });
});
