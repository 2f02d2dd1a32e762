//! A batch's checksum: CRC32C (hardware-accelerated on x86-64 and aarch64) over the batch's
//! bytes, then the sample ids and labels as little-endian integers, then a Python dataset's
//! tensor descriptions and structure, so a batch whose ids were swapped, whose bytes were
//! corrupted in transit or whose tensors were misdescribed is refused.

use hetgen_pipeline::Batch;

/// The checksum of a batch, as the .proto states it.
pub fn batch_checksum(batch: &Batch) -> u32 {
    let mut crc = crc32c::crc32c(&batch.data);
    for id in &batch.sample_ids {
        crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
    }
    for label in &batch.labels {
        crc = crc32c::crc32c_append(crc, &label.to_le_bytes());
    }
    for tensor in &batch.tensors {
        crc = crc32c::crc32c_append(crc, tensor.name.as_bytes());
        crc = crc32c::crc32c_append(crc, &crate::wire::dtype_code(tensor.dtype).to_le_bytes());
        for d in &tensor.shape {
            crc = crc32c::crc32c_append(crc, &d.to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, &tensor.offset.to_le_bytes());
    }
    crc32c::crc32c_append(crc, batch.structure.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    use hetgen_pipeline::{DType, Tensor};

    fn batch(data: &[u8], ids: &[u64], labels: &[i64]) -> Batch {
        Batch {
            epoch: 0,
            shard: 0,
            index: 0,
            sample_ids: ids.to_vec(),
            labels: labels.to_vec(),
            data: data.to_vec().into(),
            shape: [0, 0, 0],
            tensors: Vec::new(),
            structure: String::new(),
        }
    }

    #[test]
    fn any_change_changes_the_checksum() {
        let base = batch_checksum(&batch(&[1, 2, 3], &[7, 8], &[0, 1]));
        assert_eq!(base, batch_checksum(&batch(&[1, 2, 3], &[7, 8], &[0, 1])));
        assert_ne!(base, batch_checksum(&batch(&[1, 2, 4], &[7, 8], &[0, 1])));
        assert_ne!(base, batch_checksum(&batch(&[1, 2, 3], &[8, 7], &[0, 1])));
        assert_ne!(base, batch_checksum(&batch(&[1, 2, 3], &[7, 8], &[1, 0])));
    }

    #[test]
    fn a_tensor_batch_is_checked_with_its_descriptions() {
        let mut b = batch(&[0; 16], &[3, 4], &[]);
        b.tensors = vec![Tensor {
            name: "x".into(),
            dtype: DType::F32,
            shape: vec![2, 2],
            offset: 0,
        }];
        b.structure = "0".into();
        let base = batch_checksum(&b);
        let changed = [
            |b: &mut Batch| b.tensors[0].dtype = DType::I32,
            |b: &mut Batch| b.tensors[0].shape = vec![4, 1],
            |b: &mut Batch| b.tensors[0].offset = 8,
            |b: &mut Batch| b.tensors[0].name = "y".into(),
            |b: &mut Batch| b.structure = "{\"tuple\": [0]}".into(),
        ];
        for change in changed {
            let mut other = b.clone();
            change(&mut other);
            assert_ne!(batch_checksum(&other), base);
        }
    }
}
