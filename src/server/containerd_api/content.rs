//! Content: husk's content store as containerd's Content service: Info and
//! Read of committed blobs, Update of their labels (kept for the server's
//! life: a shim that finds none recompiles), Write (`write.rs`). Delete is
//! the store's own collection's, not a shim's.

use super::Labels;
use crate::api::containerd_services::content::{
    content_server, DeleteContentRequest, Info, InfoRequest, InfoResponse, ReadContentRequest,
    ReadContentResponse, UpdateRequest, UpdateResponse, WriteContentRequest, WriteContentResponse,
};
use crate::server::instrument::State;
use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// The largest piece of a blob one Read message carries.
const CHUNK: usize = 1 << 20;

pub struct Content {
    pub state: Arc<State>,
    pub labels: Labels,
}

type Answers<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl Content {
    /// The committed blob `digest`: NotFound when the store lacks it.
    fn blob(&self, digest: &str) -> Result<PathBuf, Status> {
        crate::reference::validate_digest(digest).map_err(Status::invalid_argument)?;
        self.state
            .images()?
            .blob_path(digest)
            .ok_or_else(|| Status::not_found(format!("content {digest} not found")))
    }

    fn info_of(&self, digest: &str) -> Result<Info, Status> {
        let path = self.blob(digest)?;
        let size = std::fs::metadata(&path)
            .map_err(|e| Status::internal(format!("stat {}: {e}", path.display())))?
            .len();
        let labels = self
            .labels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
            .cloned()
            .unwrap_or_default();
        Ok(Info {
            digest: digest.to_string(),
            size: size as i64,
            created_at: None,
            updated_at: None,
            labels,
        })
    }
}

/// `labels` after an Update of `paths` (containerd's field mask: `labels`
/// replaces them all, `labels.KEY` sets or, when absent from `new`,
/// removes one; no path at all replaces them all).
pub fn updated(
    mut labels: HashMap<String, String>,
    new: HashMap<String, String>,
    paths: &[String],
) -> Result<HashMap<String, String>, Status> {
    if paths.is_empty() || paths.iter().any(|p| p == "labels") {
        return Ok(new);
    }
    for p in paths {
        let key = p.strip_prefix("labels.").ok_or_else(|| {
            Status::invalid_argument(format!("cannot update {p:?} of content: only labels"))
        })?;
        match new.get(key) {
            Some(v) => labels.insert(key.to_string(), v.clone()),
            None => labels.remove(key),
        };
    }
    Ok(labels)
}

#[tonic::async_trait]
impl content_server::Content for Content {
    async fn info(&self, req: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        let info = self.info_of(&req.into_inner().digest)?;
        Ok(Response::new(InfoResponse { info: Some(info) }))
    }

    async fn update(
        &self,
        req: Request<UpdateRequest>,
    ) -> Result<Response<UpdateResponse>, Status> {
        let r = req.into_inner();
        let info = r
            .info
            .ok_or_else(|| Status::invalid_argument("an update names no content"))?;
        self.blob(&info.digest)?;
        let paths = r.update_mask.map(|m| m.paths).unwrap_or_default();
        {
            let mut all = self.labels.lock().unwrap_or_else(|p| p.into_inner());
            let old = all.remove(&info.digest).unwrap_or_default();
            let new = updated(old, info.labels, &paths)?;
            if !new.is_empty() {
                all.insert(info.digest.clone(), new);
            }
        }
        let info = self.info_of(&info.digest)?;
        Ok(Response::new(UpdateResponse { info: Some(info) }))
    }

    async fn delete(&self, req: Request<DeleteContentRequest>) -> Result<Response<()>, Status> {
        Err(Status::unimplemented(format!(
            "content {} is removed by the store's collection of unused blobs, not by a shim",
            req.into_inner().digest
        )))
    }

    type ReadStream = Answers<ReadContentResponse>;

    async fn read(
        &self,
        req: Request<ReadContentRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let r = req.into_inner();
        let path = self.blob(&r.digest)?;
        let mut f = tokio::fs::File::open(&path)
            .await
            .map_err(|e| Status::internal(format!("open {}: {e}", path.display())))?;
        let len = f
            .metadata()
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .len();
        let start = r.offset.max(0) as u64;
        if start > len {
            return Err(Status::out_of_range(format!(
                "offset {start} is past the {len} bytes of {}",
                r.digest
            )));
        }
        let end = if r.size > 0 {
            (start + r.size as u64).min(len)
        } else {
            len
        };
        f.seek(std::io::SeekFrom::Start(start))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            let mut at = start;
            while at < end {
                let mut buf = vec![0u8; CHUNK.min((end - at) as usize)];
                let sent = match f.read_exact(&mut buf).await {
                    Ok(_) => {
                        let n = buf.len() as u64;
                        let m = ReadContentResponse {
                            offset: at as i64,
                            data: buf,
                        };
                        at += n;
                        tx.send(Ok(m)).await
                    }
                    Err(e) => {
                        at = end;
                        tx.send(Err(Status::internal(format!("read: {e}")))).await
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    type WriteStream = Answers<WriteContentResponse>;

    async fn write(
        &self,
        req: Request<Streaming<WriteContentRequest>>,
    ) -> Result<Response<Self::WriteStream>, Status> {
        let images = self.state.images()?;
        let rx = super::write::start(images, self.labels.clone(), req.into_inner()).await?;
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_update_sets_and_removes_labels_by_its_mask() {
        let old = m(&[("a", "1"), ("b", "2")]);
        let new = m(&[("a", "9"), ("c", "3")]);
        let paths = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            updated(old.clone(), new.clone(), &paths(&["labels"])).expect("updates"),
            new
        );
        assert_eq!(
            updated(old.clone(), new.clone(), &paths(&["labels.a", "labels.b"])).expect("updates"),
            m(&[("a", "9")])
        );
        assert_eq!(
            updated(old.clone(), new.clone(), &[]).expect("updates"),
            new
        );
        let e = updated(old, new, &paths(&["size"])).expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }
}
