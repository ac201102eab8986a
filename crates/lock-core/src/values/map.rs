//! [`TtlMap`]: a map of small values with a TTL per field.

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::check_duration;
use crate::values::error::ValuesError;
use crate::values::shared::{MAX_TTL, SharedValues, check_named, decode_bytes, encode};

/// A map of typed values with a TTL per field, shared by every replica; from
/// [`SharedValues::map`].
///
/// # Contract
/// - `put` replaces a field's value and TTL together. An expired field is never returned, even
///   when no client has run since it expired.
/// - The map disappears once its last field has expired; [`clear`](TtlMap::clear) removes it at
///   once, in one call, whatever its size.
/// - Map names and fields follow the key rules; TTLs are 1 ms to 30 days; a value is at most
///   64 KiB of JSON. Anything else is [`ValuesError::InvalidArgument`], and nothing is sent.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::values::SharedValues;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::values::ValuesError> {
/// let sessions = SharedValues::in_memory().map::<u32>("login-attempts");
/// sessions.put("msisdn:4917012345", &3, Duration::from_secs(600)).await?;
/// assert_eq!(sessions.get("msisdn:4917012345").await?, Some(3));
///
/// tokio::time::advance(Duration::from_secs(601)).await;
/// assert_eq!(sessions.get("msisdn:4917012345").await?, None); // expired
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TtlMap<V> {
    values: SharedValues,
    name: String,
    _value: PhantomData<fn() -> V>,
}

impl SharedValues {
    /// The TTL map `name`, holding values of type `V`. Nothing is sent until it is used.
    pub fn map<V>(&self, name: &str) -> TtlMap<V> {
        TtlMap {
            values: self.clone(),
            name: name.to_owned(),
            _value: PhantomData,
        }
    }
}

impl<V: Serialize + DeserializeOwned> TtlMap<V> {
    /// The map's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stores `value` at `field`, expiring `ttl` from now.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`] (the write may or may not have happened), or an invalid
    /// argument.
    pub async fn put(&self, field: &str, value: &V, ttl: Duration) -> Result<(), ValuesError> {
        self.check(field)?;
        check_duration("ttl", ttl, Duration::from_millis(1), MAX_TTL)
            .map_err(ValuesError::argument)?;
        let bytes = encode(value)?;
        self.values
            .store()
            .map_put(&self.name, field, &bytes, ttl)
            .await
    }

    /// The value at `field`; `None` when absent or expired.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], [`ValuesError::Undecodable`], or an invalid argument.
    pub async fn get(&self, field: &str) -> Result<Option<V>, ValuesError> {
        self.check(field)?;
        match self.values.store().map_get(&self.name, field).await? {
            Some(bytes) => decode_bytes(&self.field_key(field), None, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Removes `field`; `true` if it held a live value.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], or an invalid argument.
    pub async fn remove(&self, field: &str) -> Result<bool, ValuesError> {
        self.check(field)?;
        self.values.store().map_remove(&self.name, field).await
    }

    /// Every live field and its value, sorted by field.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], or [`ValuesError::Undecodable`] naming the first field
    /// whose value does not decode.
    pub async fn entries(&self) -> Result<Vec<(String, V)>, ValuesError> {
        check_named("map", &self.name)?;
        let entries = self.values.store().map_entries(&self.name).await?;
        entries
            .into_iter()
            .map(|(field, bytes)| {
                let value = decode_bytes(&self.field_key(&field), None, &bytes)?;
                Ok((field, value))
            })
            .collect()
    }

    /// Removes every field at once; `true` if the map had any.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], or an invalid map name.
    pub async fn clear(&self) -> Result<bool, ValuesError> {
        check_named("map", &self.name)?;
        self.values.store().map_clear(&self.name).await
    }

    fn check(&self, field: &str) -> Result<(), ValuesError> {
        check_named("map", &self.name)?;
        check_named("field", field)
    }

    /// How errors name a field: `<map>[<field>]`.
    fn field_key(&self, field: &str) -> String {
        format!("{}[{field}]", self.name)
    }
}
