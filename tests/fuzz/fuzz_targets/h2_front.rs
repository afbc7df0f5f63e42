//! The HTTP/2 front every socket connection goes through: the client's
//! bytes in arbitrary pieces; whatever it passes on is again valid input
//! for it (a rewritten stream reads as a pass-through one).
#![no_main]
use husk::server::h2front::rewrite::Rewriter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut front = Rewriter::new();
    let mut out = Vec::new();
    for piece in data.split(|b| *b == 0xfe) {
        if front.feed(piece, &mut out).is_err() {
            return;
        }
    }
    let mut again = Rewriter::new();
    let mut out2 = Vec::new();
    again.feed(&out, &mut out2).expect("the front's output is valid input");
});
