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

use hetgen_pipeline::{Contents, DType, Tensor};

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

/// A batch's contents as the .proto describes them.
pub fn contents_to_wire(contents: Contents) -> proto::batch::Contents {
    match contents {
        Contents::Images { shape, labels } => proto::batch::Contents::Images(proto::Images {
            shape: shape.to_vec(),
            labels,
        }),
        Contents::Tensors { tensors, structure } => {
            proto::batch::Contents::Tensors(proto::Tensors {
                tensors: tensors
                    .into_iter()
                    .map(|t| proto::Tensor {
                        dtype: dtype_code(t.dtype),
                        name: t.name,
                        shape: t.shape,
                        offset: t.offset,
                    })
                    .collect(),
                structure,
            })
        }
    }
}

/// A received batch's contents, or what is wrong with them (the sizes are the receiver's to
/// check: it knows how many samples it asked for).
pub fn contents_from_wire(contents: Option<proto::batch::Contents>) -> Result<Contents, String> {
    match contents {
        None => Err("no contents".to_owned()),
        Some(proto::batch::Contents::Images(images)) => Ok(Contents::Images {
            shape: images
                .shape
                .try_into()
                .map_err(|shape| format!("images of shape {shape:?}, not [h, w, c]"))?,
            labels: images.labels,
        }),
        Some(proto::batch::Contents::Tensors(tensors)) => Ok(Contents::Tensors {
            tensors: tensors
                .tensors
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
                .collect::<Result<_, String>>()?,
            structure: tensors.structure,
        }),
    }
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
            data: images.into(),
            checksum: 0xdead_beef,
            contents: Some(proto::batch::Contents::Images(proto::Images {
                shape: vec![1, 1, 1],
                labels: vec![1, 0, 7],
            })),
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
    fn contents_cross_the_wire_as_they_are() {
        let images = Contents::Images {
            shape: [2, 3, 1],
            labels: vec![4, -1],
        };
        let tensors = Contents::Tensors {
            tensors: vec![Tensor {
                name: "target.boxes".into(),
                dtype: DType::Bf16,
                shape: vec![2, 4],
                offset: 8,
            }],
            structure: r#"{"dict": [["target", {"dict": [["boxes", 0]]}]]}"#.into(),
        };
        for contents in [images, tensors] {
            let wire = contents_to_wire(contents.clone());
            assert_eq!(contents_from_wire(Some(wire)).unwrap(), contents);
        }
        assert!(contents_from_wire(None).is_err());
        let flat = proto::batch::Contents::Images(proto::Images {
            shape: vec![6],
            labels: vec![],
        });
        assert!(contents_from_wire(Some(flat)).unwrap_err().contains("[6]"));
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
