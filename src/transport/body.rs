//! Frame bodies: postcard encoding into a buffer sized once.

use serde::Serialize;

/// Encodes `value` with postcard into a buffer allocated once at its exact size.
///
/// `postcard::to_stdvec` grows its buffer by doubling: for a replication request of a few MiB
/// that is a chain of reallocations, each copying what was written and faulting in fresh
/// pages (a profile of the produce bench put half the CPU there). Sizing first is a pass that
/// copies nothing.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> postcard::Result<Vec<u8>> {
    let size = postcard::experimental::serialized_size(value)?;
    postcard::serialize_with_flavor(value, Presized(Vec::with_capacity(size)))
}

/// A postcard output that appends to a buffer sized beforehand.
struct Presized(Vec<u8>);

impl postcard::ser_flavors::Flavor for Presized {
    type Output = Vec<u8>;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::types::PartitionId;

    /// `encode` writes exactly what postcard's own encoder does, into a buffer allocated once.
    #[test]
    fn encode_is_postcard_in_one_allocation() {
        let value = (
            PartitionId::new("t", 3),
            vec![Bytes::from(vec![7u8; 100_000]), Bytes::new()],
            u64::MAX,
            "hint",
        );
        let exact = encode(&value).unwrap();
        assert_eq!(exact, postcard::to_stdvec(&value).unwrap());
        assert_eq!(exact.capacity(), exact.len());
    }
}
