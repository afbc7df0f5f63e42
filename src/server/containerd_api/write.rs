//! Content/Write: one stream writes one blob, as containerd's content
//! writer does: a Stat (AlreadyExists when the expected digest is stored),
//! Writes at offsets (an offset back to an earlier one starts over from
//! there), and a Commit that checks the size and digest, stores the blob
//! and sets its labels. The blob is held in memory up to [`MAX_WRITE`]: a
//! shim writes a module it compiled, not an image's layers.

use super::Labels;
use crate::api::containerd_services::content::{
    WriteAction, WriteContentRequest, WriteContentResponse,
};
use crate::image::manager::ImageManager;
use std::sync::Arc;
use tokio::sync::mpsc::Receiver;
use tonic::{Status, Streaming};

/// The largest blob a shim may write.
pub const MAX_WRITE: usize = 512 << 20;

type Answer = Result<WriteContentResponse, Status>;

/// Reads the stream's first request, then answers each on the returned
/// channel until the commit (or the first refusal).
pub async fn start(
    images: Arc<ImageManager>,
    labels: Labels,
    mut inbound: Streaming<WriteContentRequest>,
) -> Result<Receiver<Answer>, Status> {
    let first = inbound
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the write stream sent nothing"))?;
    if !first.expected.is_empty() {
        crate::reference::validate_digest(&first.expected).map_err(Status::invalid_argument)?;
        if images.blob_path(&first.expected).is_some() {
            return Err(Status::already_exists(format!(
                "content {} exists",
                first.expected
            )));
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let mut w = Writer {
            images,
            labels,
            started: super::now(),
            buf: Vec::new(),
            expected: String::new(),
            total: 0,
        };
        let mut next = Some(first);
        loop {
            let m = match next.take() {
                Some(m) => m,
                None => match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                },
            };
            let commit = m.action == WriteAction::Commit as i32;
            let r = w.take(m);
            let failed = r.is_err();
            if tx.send(r).await.is_err() || commit || failed {
                return;
            }
        }
    });
    Ok(rx)
}

struct Writer {
    images: Arc<ImageManager>,
    labels: Labels,
    started: prost_types::Timestamp,
    buf: Vec<u8>,
    expected: String,
    total: i64,
}

impl Writer {
    fn take(&mut self, m: WriteContentRequest) -> Answer {
        let action = WriteAction::try_from(m.action)
            .map_err(|_| Status::invalid_argument(format!("unknown write action {}", m.action)))?;
        if !m.expected.is_empty() {
            crate::reference::validate_digest(&m.expected).map_err(Status::invalid_argument)?;
            self.expected = m.expected;
        }
        if m.total > 0 {
            self.total = m.total;
        }
        if action == WriteAction::Write || !m.data.is_empty() {
            let at = usize::try_from(m.offset.max(0)).unwrap_or(usize::MAX);
            if at > self.buf.len() {
                return Err(Status::out_of_range(format!(
                    "write at {at}: only {} bytes written",
                    self.buf.len()
                )));
            }
            if at + m.data.len() > MAX_WRITE {
                return Err(Status::resource_exhausted(format!(
                    "a blob written here is at most {MAX_WRITE} bytes"
                )));
            }
            self.buf.truncate(at);
            self.buf.extend_from_slice(&m.data);
        }
        let len = self.buf.len() as i64;
        let mut answer = WriteContentResponse {
            action: action as i32,
            started_at: Some(self.started),
            updated_at: Some(super::now()),
            offset: len,
            total: self.total,
            digest: String::new(),
        };
        if action != WriteAction::Commit {
            return Ok(answer);
        }
        if self.total > 0 && self.total != len {
            return Err(Status::failed_precondition(format!(
                "commit of {len} bytes, {} expected",
                self.total
            )));
        }
        let digest = crate::image::content::sha256_digest(&self.buf);
        if !self.expected.is_empty() && digest != self.expected {
            return Err(Status::failed_precondition(format!(
                "commit of {digest}, {} expected",
                self.expected
            )));
        }
        if self.images.blob_path(&digest).is_none() {
            tokio::task::block_in_place(|| self.images.put_blob(&digest, &self.buf))
                .map_err(|e| Status::internal(format!("store {digest}: {e}")))?;
        }
        if !m.labels.is_empty() {
            self.labels
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(digest.clone(), m.labels);
        }
        answer.digest = digest;
        answer.total = len;
        Ok(answer)
    }
}
