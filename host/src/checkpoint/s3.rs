//! Checkpoint storage on S3 or any S3-compatible server, through
//! aws-sdk-s3.
//!
//! Region, credentials and endpoint come from the standard AWS chain
//! (`AWS_REGION`, `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, profiles,
//! `AWS_ENDPOINT_URL`, instance roles, ...), overridden by the pipeline's
//! `[checkpoints.s3]` settings. A custom endpoint uses path-style
//! addressing unless told otherwise (S3-compatible servers expect it).
//!
//! Publication uses `If-None-Match: *`; files above
//! [`MULTIPART_THRESHOLD`] are uploaded in parts, and parts of uploads a
//! crash interrupted are aborted by
//! [`CheckpointStorage::abort_incomplete_uploads`].

use super::storage::{CheckpointStorage, StorageError};
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use std::path::Path;

/// Files at least this large are uploaded in parts (by default).
pub(crate) const MULTIPART_THRESHOLD: u64 = 16 << 20;

/// Size of one part of a multipart upload (S3's minimum is 5 MiB).
pub(crate) const PART_SIZE: usize = 8 << 20;

/// `multipart_threshold_bytes`: at least one byte, and an S3 object ends
/// at 5 TiB (parts are [`PART_SIZE`] whatever the threshold).
pub(crate) type MultipartThreshold = crate::bounded::Bounded<u64, 1, { 5 << 40 }>;

/// Settings that override the AWS environment chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Options {
    /// Endpoint URL of an S3-compatible server.
    pub endpoint: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`); default: on with a
    /// custom endpoint, off otherwise.
    pub path_style: Option<bool>,
    /// Files at least this large are uploaded in parts of `PART_SIZE`
    /// (default `MULTIPART_THRESHOLD`).
    pub multipart_threshold_bytes: Option<MultipartThreshold>,
    /// Credentials to sign with instead of the AWS chain's. Never read from
    /// a pipeline file: `sluice serve` sets a tenant's own credentials here,
    /// in memory, from what the admin granted.
    #[serde(skip)]
    pub credentials: Option<S3Credentials>,
}

/// An access key (and session token) for S3; `Debug` shows the key id
/// only, so that the secret never reaches a log or an error message.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// A session token, for temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Credentials({}, <secret>)", self.access_key_id)
    }
}

/// Checkpoints under `s3://bucket/prefix/`.
pub struct S3Storage {
    client: Client,
    bucket: String,
    prefix: String,
    multipart_threshold: u64,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for S3Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Storage({})", self.describe())
    }
}

/// The HTTP status of a failed request, if it got that far.
fn status<E>(
    error: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Option<u16> {
    error
        .raw_response()
        .map(|response| response.status().as_u16())
}

impl S3Storage {
    /// Connects to `bucket` (the AWS chain plus `options`), keeping keys
    /// under `prefix`.
    pub fn connect(bucket: &str, prefix: &str, options: &S3Options) -> Result<Self, StorageError> {
        let error = |message: String| StorageError {
            location: format!("s3://{bucket}/{prefix}"),
            message,
            not_found: false,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| error(format!("cannot start the S3 client's runtime: {e}")))?;
        let shared =
            runtime.block_on(aws_config::defaults(aws_config::BehaviorVersion::latest()).load());
        let mut config = aws_sdk_s3::config::Builder::from(&shared);
        if let Some(endpoint) = &options.endpoint {
            config = config.endpoint_url(endpoint);
        }
        if let Some(region) = &options.region {
            config = config.region(aws_sdk_s3::config::Region::new(region.clone()));
        }
        if let Some(credentials) = &options.credentials {
            config = config.credentials_provider(aws_sdk_s3::config::Credentials::new(
                credentials.access_key_id.clone(),
                credentials.secret_access_key.clone(),
                credentials.session_token.clone(),
                None,
                "sluice-granted",
            ));
        }
        let custom_endpoint = options.endpoint.is_some() || shared.endpoint_url().is_some();
        config = config.force_path_style(options.path_style.unwrap_or(custom_endpoint));
        let client = Client::from_conf(config.build());
        Ok(S3Storage {
            client,
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            multipart_threshold: options
                .multipart_threshold_bytes
                .map_or(MULTIPART_THRESHOLD, crate::bounded::Bounded::get),
            runtime,
        })
    }

    fn key(&self, key: &str) -> String {
        match self.prefix.is_empty() {
            true => key.to_string(),
            false => format!("{}/{key}", self.prefix),
        }
    }

    fn error(&self, key: &str, error: impl std::fmt::Display) -> StorageError {
        StorageError {
            location: format!("s3://{}/{}", self.bucket, self.key(key)),
            message: error.to_string(),
            not_found: false,
        }
    }

    /// Renders an SDK error with its service detail.
    fn sdk_error<E: std::error::Error + 'static>(
        &self,
        key: &str,
        error: aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    ) -> StorageError {
        StorageError {
            not_found: status(&error) == Some(404),
            ..self.error(key, aws_sdk_s3::error::DisplayErrorContext(error))
        }
    }

    /// Starts reading the object under `key`.
    async fn get_object(
        &self,
        key: &str,
    ) -> Result<aws_sdk_s3::operation::get_object::GetObjectOutput, StorageError> {
        self.client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key(key))
            .send()
            .await
            .map_err(|e| self.sdk_error(key, e))
    }

    async fn upload_in_parts(&self, key: &str, path: &Path) -> Result<u64, StorageError> {
        use tokio::io::AsyncReadExt as _;
        let full_key = self.key(key);
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(&full_key)
            .send()
            .await
            .map_err(|e| self.sdk_error(key, e))?;
        let upload_id = upload
            .upload_id()
            .ok_or_else(|| self.error(key, "the server returned no upload id"))?
            .to_string();
        let result = async {
            let mut file = tokio::fs::File::open(path)
                .await
                .map_err(|e| self.error(key, e))?;
            let mut parts = Vec::new();
            let mut total = 0u64;
            loop {
                let mut buffer = vec![0u8; PART_SIZE];
                let mut filled = 0;
                while filled < PART_SIZE {
                    let read = file
                        .read(&mut buffer[filled..])
                        .await
                        .map_err(|e| self.error(key, e))?;
                    if read == 0 {
                        break;
                    }
                    filled += read;
                }
                if filled == 0 {
                    break;
                }
                buffer.truncate(filled);
                total += filled as u64;
                let number = parts.len() as i32 + 1;
                let part = self
                    .client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(&full_key)
                    .upload_id(&upload_id)
                    .part_number(number)
                    .body(ByteStream::from(buffer))
                    .send()
                    .await
                    .map_err(|e| self.sdk_error(key, e))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(part.e_tag().map(str::to_string))
                        .build(),
                );
                if number == 1 {
                    super::failpoint::hit(super::failpoint::Failpoint::DuringUpload);
                }
            }
            self.client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(&full_key)
                .upload_id(&upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| self.sdk_error(key, e))?;
            Ok(total)
        }
        .await;
        if result.is_err() {
            let _ = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(&full_key)
                .upload_id(&upload_id)
                .send()
                .await;
        }
        result
    }
}

impl CheckpointStorage for S3Storage {
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.runtime.block_on(async {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(self.key(key))
                .body(ByteStream::from(bytes.to_vec()))
                .send()
                .await
                .map(drop)
                .map_err(|e| self.sdk_error(key, e))
        })
    }

    fn put_file(&self, key: &str, path: &Path) -> Result<u64, StorageError> {
        let size = std::fs::metadata(path)
            .map_err(|e| self.error(key, e))?
            .len();
        self.runtime.block_on(async {
            if size >= self.multipart_threshold {
                return self.upload_in_parts(key, path).await;
            }
            let body = ByteStream::from_path(path)
                .await
                .map_err(|e| self.error(key, e))?;
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(self.key(key))
                .body(body)
                .send()
                .await
                .map_err(|e| self.sdk_error(key, e))?;
            Ok(size)
        })
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StorageError> {
        self.runtime.block_on(async {
            for _ in 0..10 {
                let result = self
                    .client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(self.key(key))
                    .if_none_match("*")
                    .body(ByteStream::from(bytes.to_vec()))
                    .send()
                    .await;
                match result {
                    Ok(_) => return Ok(true),
                    Err(error) => match status(&error) {
                        Some(412) => return Ok(false),
                        // A concurrent conditional write: try again.
                        Some(409) => continue,
                        _ => return Err(self.sdk_error(key, error)),
                    },
                }
            }
            Err(self.error(key, "conditional writes kept conflicting"))
        })
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        self.runtime.block_on(async {
            let object = self.get_object(key).await?;
            let bytes = object
                .body
                .collect()
                .await
                .map_err(|e| self.error(key, e))?;
            Ok(bytes.into_bytes().to_vec())
        })
    }

    fn get_to_file(&self, key: &str, path: &Path) -> Result<(), StorageError> {
        use tokio::io::AsyncWriteExt as _;
        self.runtime.block_on(async {
            let mut object = self.get_object(key).await?;
            let mut file = tokio::fs::File::create(path)
                .await
                .map_err(|e| self.error(key, e))?;
            while let Some(chunk) = object
                .body
                .try_next()
                .await
                .map_err(|e| self.error(key, e))?
            {
                file.write_all(&chunk)
                    .await
                    .map_err(|e| self.error(key, e))?;
            }
            file.flush().await.map_err(|e| self.error(key, e))
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let root = self.key("");
        self.runtime.block_on(async {
            let mut keys = Vec::new();
            let mut pages = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(self.key(prefix))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| self.sdk_error(prefix, e))?;
                for object in page.contents() {
                    if let Some(key) = object.key().and_then(|k| k.strip_prefix(&root)) {
                        keys.push(key.to_string());
                    }
                }
            }
            keys.sort();
            Ok(keys)
        })
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.runtime.block_on(async {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(self.key(key))
                .send()
                .await
                .map(drop)
                .map_err(|e| self.sdk_error(key, e))
        })
    }

    fn abort_incomplete_uploads(&self) -> Result<usize, StorageError> {
        let prefix = self.key("");
        self.runtime.block_on(async {
            let listed = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(&prefix)
                .send()
                .await
                .map_err(|e| self.sdk_error("", e))?;
            let mut aborted = 0;
            for upload in listed.uploads() {
                let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) else {
                    continue;
                };
                let result = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(id)
                    .send()
                    .await;
                match result {
                    Ok(_) => aborted += 1,
                    // Completed or aborted since it was listed: a dead
                    // run's last request can still reach the server.
                    Err(error)
                        if error
                            .as_service_error()
                            .is_some_and(|e| e.is_no_such_upload()) => {}
                    Err(error) => return Err(self.sdk_error(key, error)),
                }
            }
            Ok(aborted)
        })
    }
}
