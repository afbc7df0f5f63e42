//! SPDY/3.1 frames from a streaming client (kubectl exec/attach/port-forward):
//! the frame decoder and the zlib header blocks, until the input ends.
#![no_main]
use husk::streaming::spdy::frame::{read, HeaderDecoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut dec = HeaderDecoder::new();
    let mut input = data;
    futures::executor::block_on(async {
        for _ in 0..10_000 {
            match read(&mut input, &mut dec).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    });
    let _ = HeaderDecoder::new().decode(data);
});
