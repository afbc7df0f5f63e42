//! `husk images pull|ls|rm|import`: the image CLI, over CRI (and husk's
//! admin API for import and pull progress).

use crate::api::admin::admin_client::AdminClient;
use crate::api::admin::{ImportImageRequest, ListPullsRequest};
use crate::api::cri::image_service_client::ImageServiceClient;
use crate::api::cri::{
    AuthConfig, ImageSpec, ListImagesRequest, PullImageRequest, RemoveImageRequest,
};
use anyhow::Context as _;
use std::time::Duration;

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

/// Pulls with a progress bar fed by the admin API when the server has it.
pub async fn pull(endpoint: &str, image: &str, creds: Option<&str>) -> anyhow::Result<()> {
    let ch = crate::api::connect(endpoint).await?;
    let auth = creds
        .map(|c| {
            let (u, p) = c.split_once(':').context("--creds must be USER:PASSWORD")?;
            anyhow::Ok(AuthConfig {
                username: u.to_string(),
                password: p.to_string(),
                ..Default::default()
            })
        })
        .transpose()?;
    let mut client = ImageServiceClient::new(ch.clone()).max_decoding_message_size(64 << 20);
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(image.to_string());
    let watch = {
        let bar = bar.clone();
        let mut admin = AdminClient::new(ch);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let Ok(resp) = admin.list_pulls(ListPullsRequest {}).await else {
                    bar.tick();
                    continue;
                };
                let (done, total) = resp
                    .into_inner()
                    .pulls
                    .iter()
                    .fold((0, 0), |(d, t), p| (d + p.bytes_done, t + p.bytes_total));
                bar.set_length(total);
                bar.set_position(done);
            }
        })
    };
    let r = client
        .pull_image(PullImageRequest {
            image: spec(image),
            auth,
            sandbox_config: None,
        })
        .await;
    watch.abort();
    bar.finish_and_clear();
    let id = r
        .with_context(|| format!("pull {image}"))?
        .into_inner()
        .image_ref;
    println!("{image}: {id}");
    Ok(())
}

pub async fn list(endpoint: &str, quiet: bool) -> anyhow::Result<()> {
    let mut client = ImageServiceClient::new(crate::api::connect(endpoint).await?)
        .max_decoding_message_size(64 << 20);
    let images = client
        .list_images(ListImagesRequest { filter: None })
        .await?
        .into_inner()
        .images;
    if quiet {
        for i in images {
            println!("{}", i.id);
        }
        return Ok(());
    }
    println!("{:<60} {:<15} {:>10}", "IMAGE", "IMAGE ID", "SIZE");
    for i in images {
        let short =
            i.id.trim_start_matches("sha256:")
                .chars()
                .take(12)
                .collect::<String>();
        let size = format!("{:.1}MB", i.size as f64 / 1e6);
        let names: Vec<&String> = if i.repo_tags.is_empty() {
            i.repo_digests.iter().collect()
        } else {
            i.repo_tags.iter().collect()
        };
        if names.is_empty() {
            println!("{:<60} {:<15} {:>10}", "<none>", short, size);
        }
        for n in names {
            println!("{:<60} {:<15} {:>10}", n, short, size);
        }
    }
    Ok(())
}

pub async fn remove(endpoint: &str, images: &[String]) -> anyhow::Result<()> {
    let mut client = ImageServiceClient::new(crate::api::connect(endpoint).await?);
    for i in images {
        client
            .remove_image(RemoveImageRequest { image: spec(i) })
            .await
            .with_context(|| format!("remove {i}"))?;
        println!("removed {i}");
    }
    Ok(())
}

pub async fn import(
    endpoint: &str,
    file: &std::path::Path,
    tag: Option<&str>,
) -> anyhow::Result<()> {
    let path = std::fs::canonicalize(file).with_context(|| format!("{}", file.display()))?;
    let mut admin = AdminClient::new(crate::api::connect(endpoint).await?);
    let resp = admin
        .import_image(ImportImageRequest {
            path: path.display().to_string(),
            tag: tag.unwrap_or_default().to_string(),
        })
        .await
        .with_context(|| format!("import {}", file.display()))?
        .into_inner();
    for i in resp.images {
        let names = if i.repo_tags.is_empty() {
            "<none>".to_string()
        } else {
            i.repo_tags.join(", ")
        };
        println!("imported {names}: {}", i.id);
    }
    Ok(())
}
