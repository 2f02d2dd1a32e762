//! A batch's checksum: CRC32C (hardware-accelerated on x86-64 and aarch64) over the image bytes,
//! then the sample ids and labels as little-endian integers, so a batch whose ids were swapped or
//! whose pixels were corrupted in transit is refused.

/// The checksum of a batch's payload.
pub fn batch_checksum(images: &[u8], sample_ids: &[u64], labels: &[i64]) -> u32 {
    let mut crc = crc32c::crc32c(images);
    for id in sample_ids {
        crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
    }
    for label in labels {
        crc = crc32c::crc32c_append(crc, &label.to_le_bytes());
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_change_changes_the_checksum() {
        let base = batch_checksum(&[1, 2, 3], &[7, 8], &[0, 1]);
        assert_eq!(base, batch_checksum(&[1, 2, 3], &[7, 8], &[0, 1]));
        assert_ne!(base, batch_checksum(&[1, 2, 4], &[7, 8], &[0, 1]));
        assert_ne!(base, batch_checksum(&[1, 2, 3], &[8, 7], &[0, 1]));
        assert_ne!(base, batch_checksum(&[1, 2, 3], &[7, 8], &[1, 0]));
    }
}
