//! ImageStatus: an unknown image is an empty response, not an error (CRI).
//! Verbose adds `info` = JSON with the config, manifest digest and chain IDs.

use crate::api::cri::{ImageStatusRequest, ImageStatusResponse};
use crate::server::instrument::State;
use std::collections::HashMap;
use tonic::Status;

pub async fn handle(state: &State, req: ImageStatusRequest) -> Result<ImageStatusResponse, Status> {
    let images = state.images()?;
    let name = super::spec_name(req.image.as_ref())?;
    let Some(rec) = images.find(name) else {
        return Ok(ImageStatusResponse::default());
    };
    let mut info = HashMap::new();
    if req.verbose {
        let config: serde_json::Value = images
            .config_json(&rec)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null);
        let v = serde_json::json!({
            "imageSpec": config,
            "manifestDigest": rec.manifest_digest,
            "indexDigest": rec.index_digest,
            "chainIDs": rec.chain_ids,
            "layers": rec.layers,
            "snapshotter": "overlayfs",
        });
        info.insert("info".to_string(), v.to_string());
    }
    Ok(ImageStatusResponse {
        image: Some(super::to_cri(state, &rec)),
        info,
    })
}
