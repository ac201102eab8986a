//! Reads of one cache made together go to Redis as one `HMGET`.

use std::sync::atomic::{AtomicBool, Ordering};

use fred::bytes::Bytes;
use fred::prelude::*;

use crate::core::batch::{Batched, Batcher, Reply};
use crate::core::error::Refusal;

/// The most reads one `HMGET` carries: a full collection is sent while the next reads start
/// another, so that several are in flight at once. 8 to 32 measured alike with 32 readers
/// (docs/performance.md, "Cache").
const MAX_BATCH: usize = 16;

/// A read made while another is in flight shares an `HMGET` with the reads of its cache
/// ([`Batcher`]); a read made alone is one `HGET`, and so is every read once Redis refused
/// `HMGET` to this user (an ACL written for an earlier version).
pub(crate) fn reads(client: &Client) -> Batcher<Reads> {
    Batcher::new(
        Reads {
            client: client.clone(),
            one_by_one: AtomicBool::new(false),
        },
        MAX_BATCH,
    )
}

/// Fields of one hash (the group), read with one `HMGET`.
pub(crate) struct Reads {
    client: Client,
    /// Set when Redis refused `HMGET` to this user: reads go one by one from then on.
    one_by_one: AtomicBool,
}

impl Batched for Reads {
    type Group = String;
    type Call = String;
    type Output = Option<Bytes>;

    async fn send(&self, hash: &String, fields: Vec<String>) -> Vec<Reply<Self>> {
        if let [field] = fields.as_slice() {
            return vec![self.client.hget(hash, field.as_str()).await];
        }
        let names: Vec<&str> = fields.iter().map(String::as_str).collect();
        let reply: Result<Vec<Option<Bytes>>, Error> = self.client.hmget(hash, names).await;
        match reply {
            Ok(values) if values.len() == fields.len() => values.into_iter().map(Ok).collect(),
            Ok(values) => {
                let error = Error::new(
                    ErrorKind::Protocol,
                    format!("HMGET of {} fields answered {}", fields.len(), values.len()),
                );
                vec![Err(error); fields.len()]
            }
            Err(error) if refuses_hmget(&error) => {
                if !self.one_by_one.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, "Redis refused HMGET to this user: cache reads go one by one (grant +hmget, docs/cache.md)");
                }
                let mut replies = Vec::with_capacity(fields.len());
                for field in fields {
                    replies.push(self.client.hget(hash, field).await);
                }
                replies
            }
            Err(error) => vec![Err(error); fields.len()],
        }
    }

    fn batching(&self) -> bool {
        !self.one_by_one.load(Ordering::Relaxed)
    }
}

/// Whether `error` refuses the `HMGET` command itself to this user, not a key.
fn refuses_hmget(error: &Error) -> bool {
    Refusal::of_reply(error) == Some(Refusal::NoPermission)
        && error.details().to_ascii_lowercase().contains("'hmget'")
}
