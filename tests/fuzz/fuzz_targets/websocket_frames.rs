//! WebSocket frames from a streaming client, read as the server reads them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(data).await.expect("write");
        client.shutdown().await.expect("shutdown");
        let (mut reader, _writer) = husk::streaming::ws::split(server, true);
        for _ in 0..10_000 {
            match reader.next().await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        drop(client);
    });
});
