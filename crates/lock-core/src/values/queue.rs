//! [`Queue`]: a reliable queue of JSON items handed between replicas.

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::check_duration;
use crate::values::error::ValuesError;
use crate::values::port::{Delivery, Pushed};
use crate::values::shared::{MAX_TTL, SharedValues, check_named, encode};

/// The default and largest bound of a queue: 1,000,000 items.
pub const MAX_QUEUE_LEN: u64 = 1_000_000;
/// How long a queue lives after its last push unless set otherwise: 7 days.
pub const DEFAULT_QUEUE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most items one [`Queue::take`] returns: 1,000.
pub const MAX_TAKE: usize = 1_000;
/// The most items one [`Queue::push_all`] appends, and the most ids one [`Queue::ack`]
/// acknowledges: 10,000, so that one call never holds the store (one Redis script) for long.
pub const MAX_PUSH: usize = 10_000;
/// The most bytes of JSON one [`Queue::push_all`] carries, all items together: 8 MiB.
pub const MAX_PUSH_BYTES: usize = 8 * 1024 * 1024;

/// What one [`Queue::take`] got: the items, and those that no longer deserialize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken<T> {
    /// The items, in push order.
    pub items: Vec<Delivery<T>>,
    /// Items that do not deserialize as `T` (pushed by another version of the code), with
    /// their JSON: taken like the others, so acknowledge them once handled or logged.
    pub undecodable: Vec<Delivery<Vec<u8>>>,
}

impl<T> Taken<T> {
    /// The ids of every item taken, decodable or not, for [`Queue::ack`].
    pub fn ids(&self) -> Vec<String> {
        let items = self.items.iter().map(|d| d.id.clone());
        items
            .chain(self.undecodable.iter().map(|d| d.id.clone()))
            .collect()
    }
}

/// A queue of typed JSON items shared by every replica, from [`SharedValues::queue`]: pushed by
/// any, each taken by one consumer at a time, and removed when acknowledged.
///
/// # Contract
/// - **At least once.** An item taken and not acknowledged (the consumer crashed, or its reply
///   was lost) is taken again by a take whose visibility timeout has passed since it was last
///   delivered, with its delivery count raised. An acknowledged item is never taken again.
/// - **Pushed once**, unless its store says otherwise: a push reported done appended its items
///   once, and one that failed may or may not have.
/// - **Bounded.** A take returns at most its `max` items (up to [`MAX_TAKE`]). A push that
///   would make the queue hold more than its bound ([`MAX_QUEUE_LEN`] unless set lower) is
///   refused whole with [`ValuesError::QueueFull`]. The queue ends with its items a TTL after
///   its last push ([`DEFAULT_QUEUE_TTL`] unless set otherwise).
/// - **Ordered** per take: reclaimed items first, then new ones, each in push order.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::values::SharedValues;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::values::ValuesError> {
/// let changes = SharedValues::in_memory().queue::<String>("tariff-changes");
/// changes.push_all(&["t-1".to_owned(), "t-2".to_owned()]).await?;
///
/// let taken = changes.take(100, Duration::from_secs(30)).await?;
/// for delivery in &taken.items {
///     println!("apply {}", delivery.item); // … handle it, then acknowledge …
/// }
/// assert_eq!(changes.ack(&taken.ids()).await?, 2);
/// assert_eq!(changes.len().await?, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Queue<T> {
    values: SharedValues,
    name: String,
    consumer: String,
    max_len: u64,
    ttl: Duration,
    _item: PhantomData<fn() -> T>,
}

impl SharedValues {
    /// The queue `name` of items of type `T`, with the default bound and TTL. Nothing is sent
    /// until it is used.
    pub fn queue<T>(&self, name: &str) -> Queue<T> {
        let owner = self.store().new_owner();
        Queue {
            values: self.clone(),
            name: name.to_owned(),
            consumer: crate::OwnerTokens::instance_id_of(&owner).to_owned(),
            max_len: MAX_QUEUE_LEN,
            ttl: DEFAULT_QUEUE_TTL,
            _item: PhantomData,
        }
    }
}

impl<T: Serialize + DeserializeOwned> Queue<T> {
    /// This queue with at most `max_len` items (1 to [`MAX_QUEUE_LEN`]).
    ///
    /// # Errors
    /// [`ValuesError::InvalidArgument`] for a bound outside the range.
    pub fn max_len(mut self, max_len: u64) -> Result<Self, ValuesError> {
        if !(1..=MAX_QUEUE_LEN).contains(&max_len) {
            return Err(ValuesError::invalid(
                "max_len",
                max_len.to_string(),
                format!("accepted: 1 to {MAX_QUEUE_LEN} items"),
            ));
        }
        self.max_len = max_len;
        Ok(self)
    }

    /// This queue living `ttl` after its last push (1 s to 30 days).
    ///
    /// # Errors
    /// [`ValuesError::InvalidArgument`] for a TTL outside the range.
    pub fn ttl(mut self, ttl: Duration) -> Result<Self, ValuesError> {
        check_duration("ttl", ttl, Duration::from_secs(1), MAX_TTL)
            .map_err(ValuesError::argument)?;
        self.ttl = ttl;
        Ok(self)
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Appends `item`; its id.
    ///
    /// # Errors
    /// [`ValuesError::QueueFull`], [`ValuesError::Unavailable`] (it may or may not have been
    /// appended), or an invalid argument (a push of more items than the queue's bound).
    pub async fn push(&self, item: &T) -> Result<String, ValuesError> {
        let mut ids = self.push_all(std::slice::from_ref(item)).await?;
        Ok(ids.pop().unwrap_or_default())
    }

    /// Appends `items` (at most [`MAX_PUSH`], [`MAX_PUSH_BYTES`] of JSON together) in order,
    /// all or none; their ids.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub async fn push_all(&self, items: &[T]) -> Result<Vec<String>, ValuesError> {
        check_named("queue", &self.name)?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        if items.len() > MAX_PUSH {
            let problem = format!(
                "more items than one push carries; accepted: at most {MAX_PUSH} (push in batches, each all or none)"
            );
            return Err(ValuesError::invalid(
                "items",
                items.len().to_string(),
                problem,
            ));
        }
        if items.len() as u64 > self.max_len {
            let problem = format!(
                "more items than the queue `{}` ever holds; accepted: at most {} (its max_len)",
                self.name, self.max_len
            );
            return Err(ValuesError::invalid(
                "items",
                items.len().to_string(),
                problem,
            ));
        }
        let items = items.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
        let bytes: usize = items.iter().map(Vec::len).sum();
        if bytes > MAX_PUSH_BYTES {
            let problem = format!(
                "more JSON than one push carries; accepted: at most {MAX_PUSH_BYTES} bytes, all items together (push in batches, each all or none)"
            );
            return Err(ValuesError::invalid(
                "items",
                format!("of {bytes} bytes"),
                problem,
            ));
        }
        let pushed = self
            .values
            .store()
            .queue_push(&self.name, &items, self.max_len, self.ttl)
            .await?;
        match pushed {
            Pushed::Appended(ids) => Ok(ids),
            Pushed::Full { len } => Err(ValuesError::QueueFull {
                queue: self.name.clone(),
                len,
                max_len: self.max_len,
                pushed: items.len(),
            }),
        }
    }

    /// Takes up to `max` items (1 to [`MAX_TAKE`]) for this replica: first items taken before
    /// and left unacknowledged for `visibility` (1 ms to 30 days), then new ones.
    ///
    /// The visibility is this take's, not the one that took an item before: give every
    /// consumer of a queue the same.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`] (items may have been taken: they come back after the
    /// visibility timeout), or an invalid argument.
    pub async fn take(&self, max: usize, visibility: Duration) -> Result<Taken<T>, ValuesError> {
        check_named("queue", &self.name)?;
        if !(1..=MAX_TAKE).contains(&max) {
            return Err(ValuesError::invalid(
                "max",
                max.to_string(),
                format!("accepted: 1 to {MAX_TAKE} items"),
            ));
        }
        check_duration("visibility", visibility, Duration::from_millis(1), MAX_TTL)
            .map_err(ValuesError::argument)?;
        let deliveries = self
            .values
            .store()
            .queue_take(&self.name, &self.consumer, max, visibility)
            .await?;
        let mut taken = Taken {
            items: Vec::with_capacity(deliveries.len()),
            undecodable: Vec::new(),
        };
        for delivery in deliveries {
            match serde_json::from_slice(&delivery.item) {
                Ok(item) => taken.items.push(Delivery {
                    id: delivery.id,
                    item,
                    deliveries: delivery.deliveries,
                }),
                Err(error) => {
                    tracing::warn!(queue = %self.name, id = %delivery.id, %error, "a queue item does not deserialize; it is returned as undecodable");
                    taken.undecodable.push(delivery);
                }
            }
        }
        Ok(taken)
    }

    /// Acknowledges taken items by id (at most [`MAX_PUSH`]), removing them; how many were
    /// still pending (an id no longer in the queue, as one acknowledged before, counts 0).
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`]: acknowledge again (it is idempotent).
    /// [`ValuesError::InvalidArgument`] for more ids than that, an id not of the form a take
    /// gives, or one of an item in the queue that no take gave; nothing is acknowledged then.
    pub async fn ack(&self, ids: &[String]) -> Result<u64, ValuesError> {
        check_named("queue", &self.name)?;
        if ids.is_empty() {
            return Ok(0);
        }
        if ids.len() > MAX_PUSH {
            let problem = format!(
                "more ids than one acknowledgement carries; accepted: at most {MAX_PUSH} (acknowledge in batches)"
            );
            return Err(ValuesError::invalid("ids", ids.len().to_string(), problem));
        }
        self.values.store().queue_ack(&self.name, ids).await
    }

    /// How many items the queue holds, taken and unacknowledged ones included.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], or an invalid name.
    pub async fn len(&self) -> Result<u64, ValuesError> {
        check_named("queue", &self.name)?;
        self.values.store().queue_len(&self.name).await
    }

    /// Whether the queue holds no item, taken or not.
    ///
    /// # Errors
    /// As [`len`](Self::len).
    pub async fn is_empty(&self) -> Result<bool, ValuesError> {
        Ok(self.len().await? == 0)
    }
}
