//! A batch as gRPC frames, without copying its images.
//!
//! tonic's codec encodes every message into its own buffer, which for a tens-of-MB batch is a
//! full copy of the images on the server's critical path (a sixth of the server's CPU time in
//! a loopback profile). Protobuf lets a message be the concatenation of its fields in any order,
//! so a batch goes out as two pieces: a small head (the gRPC length prefix, every other field,
//! and the `images` field's tag and length) and the images' own `Bytes`, which HTTP/2 sends
//! from where the pipeline wrote them. Any gRPC client decodes the result as a normal `Batch`.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{encode_varint, encoded_len_varint};

use hetgen_pipeline::{DType, Tensor};

use crate::proto::{self, Batch};

/// `Batch.data` is field 7, length-delimited (wire type 2).
const DATA_KEY: u8 = (7 << 3) | 2;

/// The .proto's `DType` number of `dtype` (its enum lists them in [`DType::ALL`]'s order).
pub fn dtype_code(dtype: DType) -> i32 {
    DType::ALL
        .iter()
        .position(|d| *d == dtype)
        .map_or(0, |i| i as i32 + 1)
}

/// The [`DType`] of a .proto `DType` number, if it names one.
pub fn dtype_from_code(code: i32) -> Option<DType> {
    usize::try_from(code - 1)
        .ok()
        .and_then(|i| DType::ALL.get(i).copied())
}

/// A batch's tensors as the .proto describes them.
pub fn tensors_to_wire(tensors: &[Tensor]) -> Vec<proto::Tensor> {
    tensors
        .iter()
        .map(|t| proto::Tensor {
            name: t.name.clone(),
            dtype: dtype_code(t.dtype),
            shape: t.shape.clone(),
            offset: t.offset,
        })
        .collect()
}

/// A received batch's tensors, or what is wrong with them.
pub fn tensors_from_wire(tensors: Vec<proto::Tensor>) -> Result<Vec<Tensor>, String> {
    tensors
        .into_iter()
        .map(|t| {
            Ok(Tensor {
                dtype: dtype_from_code(t.dtype).ok_or_else(|| {
                    format!("tensor `{}` has an unknown dtype {}", t.name, t.dtype)
                })?,
                name: t.name,
                shape: t.shape,
                offset: t.offset,
            })
        })
        .collect()
}

/// The frame of `batch`: its head, then its images (empty when the batch has none).
pub fn batch_frame(mut batch: Batch) -> Result<(Bytes, Bytes), String> {
    let images = std::mem::take(&mut batch.data);
    let images_field = if images.is_empty() {
        0
    } else {
        1 + encoded_len_varint(images.len() as u64) + images.len()
    };
    let fields = batch.encoded_len();
    let len = fields + images_field;
    let len = u32::try_from(len).map_err(|_| format!("a {len}-byte batch exceeds gRPC's 4 GiB"))?;
    // The prefix, the other fields, and at most a key and a 10-byte varint for the images.
    let mut head = BytesMut::with_capacity(5 + fields + 11);
    head.put_u8(0); // not compressed
    head.put_u32(len);
    batch.encode(&mut head).map_err(|e| e.to_string())?;
    if !images.is_empty() {
        head.put_u8(DATA_KEY);
        encode_varint(images.len() as u64, &mut head);
    }
    Ok((head.freeze(), images))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(images: Vec<u8>) -> Batch {
        Batch {
            epoch: 3,
            shard: 17,
            index: 2,
            last: true,
            sample_ids: vec![5, 9, 300_000],
            labels: vec![1, 0, 7],
            data: images.into(),
            checksum: 0xdead_beef,
            tensors: vec![proto::Tensor {
                name: "image".into(),
                dtype: 1,
                shape: vec![3],
                offset: 0,
            }],
            structure: "0".into(),
        }
    }

    #[test]
    fn head_and_images_decode_as_the_batch() {
        for images in [vec![], vec![42], (0..=255u8).cycle().take(70_000).collect()] {
            let want = batch(images);
            let (head, images) = batch_frame(want.clone()).unwrap();
            let frame = [head.as_ref(), images.as_ref()].concat();
            assert_eq!(frame[0], 0);
            let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
            assert_eq!(len, frame.len() - 5);
            assert_eq!(Batch::decode(&frame[5..]).unwrap(), want);
            // The same bytes as prost's own encoding, up to field order.
            assert_eq!(len, want.encoded_len());
        }
    }

    #[test]
    fn dtype_codes_are_the_protos() {
        use proto::DType as Wire;
        let wire = [
            (DType::U8, Wire::DtypeUint8),
            (DType::I8, Wire::DtypeInt8),
            (DType::I16, Wire::DtypeInt16),
            (DType::I32, Wire::DtypeInt32),
            (DType::I64, Wire::DtypeInt64),
            (DType::F16, Wire::DtypeFloat16),
            (DType::Bf16, Wire::DtypeBfloat16),
            (DType::F32, Wire::DtypeFloat32),
            (DType::F64, Wire::DtypeFloat64),
            (DType::Bool, Wire::DtypeBool),
        ];
        for (dtype, code) in wire {
            assert_eq!(dtype_code(dtype), code as i32);
            assert_eq!(dtype_from_code(code as i32), Some(dtype));
        }
        assert_eq!(dtype_from_code(0), None);
        assert_eq!(dtype_from_code(11), None);
    }

    #[test]
    fn the_images_are_not_copied() {
        let images = Bytes::from(vec![7u8; 1 << 20]);
        let (_, sent) = batch_frame(Batch {
            data: images.clone(),
            ..batch(vec![])
        })
        .unwrap();
        assert_eq!(sent.as_ptr(), images.as_ptr());
    }
}
