//! A batch's checksum: CRC32C (hardware-accelerated on x86-64 and aarch64) over the batch's
//! bytes, then the sample ids as little-endian integers, then what the contents say of the
//! bytes (an image batch's shape and labels, a tensor batch's tensor descriptions and
//! structure), so a batch whose ids were swapped, whose bytes were corrupted in transit or whose
//! contents were misdescribed is refused.

use hetgen_pipeline::{Batch, Contents};

/// The checksum of a batch, as the .proto states it.
pub fn batch_checksum(batch: &Batch) -> u32 {
    let mut crc = crc32c::crc32c(&batch.data);
    for id in &batch.sample_ids {
        crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
    }
    match &batch.contents {
        Contents::Images { shape, labels } => {
            for d in shape {
                crc = crc32c::crc32c_append(crc, &d.to_le_bytes());
            }
            for label in labels {
                crc = crc32c::crc32c_append(crc, &label.to_le_bytes());
            }
            crc
        }
        Contents::Tensors { tensors, structure } => {
            for tensor in tensors {
                crc = crc32c::crc32c_append(crc, tensor.name.as_bytes());
                crc = crc32c::crc32c_append(
                    crc,
                    &crate::wire::dtype_code(tensor.dtype).to_le_bytes(),
                );
                for d in &tensor.shape {
                    crc = crc32c::crc32c_append(crc, &d.to_le_bytes());
                }
                crc = crc32c::crc32c_append(crc, &tensor.offset.to_le_bytes());
            }
            crc32c::crc32c_append(crc, structure.as_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use hetgen_pipeline::{DType, Tensor};

    fn images(data: &[u8], ids: &[u64], labels: &[i64]) -> Batch {
        Batch {
            epoch: 0,
            shard: 0,
            index: 0,
            sample_ids: ids.to_vec(),
            data: data.to_vec().into(),
            contents: Contents::Images {
                shape: [1, 3, 1],
                labels: labels.to_vec(),
            },
        }
    }

    #[test]
    fn any_change_changes_the_checksum() {
        let base = batch_checksum(&images(&[1, 2, 3], &[7, 8], &[0, 1]));
        assert_eq!(base, batch_checksum(&images(&[1, 2, 3], &[7, 8], &[0, 1])));
        assert_ne!(base, batch_checksum(&images(&[1, 2, 4], &[7, 8], &[0, 1])));
        assert_ne!(base, batch_checksum(&images(&[1, 2, 3], &[8, 7], &[0, 1])));
        assert_ne!(base, batch_checksum(&images(&[1, 2, 3], &[7, 8], &[1, 0])));
        let mut reshaped = images(&[1, 2, 3], &[7, 8], &[0, 1]);
        reshaped.contents = Contents::Images {
            shape: [3, 1, 1],
            labels: vec![0, 1],
        };
        assert_ne!(base, batch_checksum(&reshaped));
    }

    #[test]
    fn a_tensor_batch_is_checked_with_its_descriptions() {
        let b = Batch {
            contents: Contents::Tensors {
                tensors: vec![Tensor {
                    name: "x".into(),
                    dtype: DType::F32,
                    shape: vec![2, 2],
                    offset: 0,
                }],
                structure: "0".into(),
            },
            ..images(&[0; 16], &[3, 4], &[])
        };
        let base = batch_checksum(&b);
        let changed = [
            |t: &mut Tensor, _: &mut String| t.dtype = DType::I32,
            |t: &mut Tensor, _: &mut String| t.shape = vec![4, 1],
            |t: &mut Tensor, _: &mut String| t.offset = 8,
            |t: &mut Tensor, _: &mut String| t.name = "y".into(),
            |_: &mut Tensor, s: &mut String| *s = "{\"tuple\": [0]}".into(),
        ];
        for change in changed {
            let mut other = b.clone();
            let Contents::Tensors { tensors, structure } = &mut other.contents else {
                unreachable!()
            };
            change(&mut tensors[0], structure);
            assert_ne!(batch_checksum(&other), base);
        }
    }
}
