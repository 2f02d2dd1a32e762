//! Named tensors: how a batch made by a user's Python dataset describes its bytes.
//!
//! A built-in image batch is one `u8` tensor and a label per sample; a Python dataset's batch is
//! any number of tensors of any of [`DType`]'s types, laid out one after another in the batch's
//! one buffer, with a [structure](crate::Batch::structure) that says how they nest (a tuple, a
//! dict, …), so the trainer gets back exactly what the dataset returned.

use serde::{Deserialize, Serialize};

/// Element type of a tensor. Every type is stored little-endian; `Bf16` is the upper half of an
/// `f32`, as `torch.bfloat16`; `Bool` is one byte, 0 or 1.
///
/// [`DType::name`] is the one table of names: serde, the wire, the worker protocol and
/// Python's views all spell a type as it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    I8,
    I16,
    I32,
    I64,
    F16,
    Bf16,
    F32,
    F64,
    Bool,
}

impl Serialize for DType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for DType {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        DType::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
            serde::de::Error::custom(format!(
                "unknown dtype `{name}` (known: {})",
                names.join(", ")
            ))
        })
    }
}

impl DType {
    /// Every type, in the order of the wire's enum.
    pub const ALL: [DType; 10] = [
        DType::U8,
        DType::F32,
        DType::I64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::F16,
        DType::Bf16,
        DType::F64,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The name numpy and torch give it (`uint8`, `bfloat16`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::Bf16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::Bool => "bool",
        }
    }

    /// The type named `name`, as [`DType::name`] writes it.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor of a batch: a C-contiguous range of the batch's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tensor {
    /// Its place in the batch's structure: keys and indices joined by `.` (`image`, `1`,
    /// `target.boxes`).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Whole shape, samples first.
    pub shape: Vec<u64>,
    /// Where its bytes start in the batch's buffer.
    pub offset: u64,
}

impl Tensor {
    /// Bytes it takes: the product of its shape times its element size (`None` on overflow).
    pub fn bytes(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(self.dtype.size() as u64, |n, d| n.checked_mul(*d))
    }

    /// Checks that every tensor lies inside a buffer of `len` bytes.
    pub fn check_all(tensors: &[Tensor], len: usize) -> Result<(), String> {
        for t in tensors {
            let end = t.bytes().and_then(|b| b.checked_add(t.offset));
            if end.is_none_or(|end| end > len as u64) {
                return Err(format!(
                    "tensor `{}` ({} {:?} at byte {}) reaches past the batch's {len} bytes",
                    t.name, t.dtype, t.shape, t.offset
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_match_numpy() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
        }
        assert_eq!(DType::Bf16.size(), 2);
        assert_eq!(DType::from_name("complex64"), None);
    }

    #[test]
    fn tensors_must_fit_their_buffer() {
        let t = |offset, shape: Vec<u64>| Tensor {
            name: "x".into(),
            dtype: DType::F32,
            shape,
            offset,
        };
        assert!(Tensor::check_all(&[t(0, vec![2, 3]), t(24, vec![2])], 32).is_ok());
        assert!(Tensor::check_all(&[t(16, vec![2, 3])], 32).is_err());
        assert!(Tensor::check_all(&[t(0, vec![2, u64::MAX])], 32).is_err());
    }
}
