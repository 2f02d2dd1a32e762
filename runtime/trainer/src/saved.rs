//! Tensors read back from a file, restored by name into live ones.
//!
//! Model variables (from a checkpoint or a trained model's file) and an optimizer's state are
//! both read back this way, so a missing tensor or one of another shape is reported the same
//! way whichever file it came from. It has its own module because a checkpoint uses the model
//! and the optimizer, which both use it.

use std::collections::HashMap;

use tch::Tensor;

/// Tensors read back from a file, by name, to restore into live ones of the same names.
pub(crate) struct Saved(HashMap<String, Tensor>);

impl Saved {
    pub fn new(tensors: Vec<(String, Tensor)>) -> Saved {
        Saved(tensors.into_iter().collect())
    }

    /// The saved tensor `name`, taken out.
    pub fn take(&mut self, name: &str) -> Result<Tensor, String> {
        self.0
            .remove(name)
            .ok_or_else(|| format!("no tensor `{name}`"))
    }

    /// Copies the saved `name` into `live` (what `live` is, e.g. "the parameter", goes into
    /// the error): one missing or of another shape is an error naming it. Call under
    /// `tch::no_grad_guard`, as `live` may be a variable that requires grad.
    pub fn restore(&mut self, name: &str, live: &mut Tensor, what: &str) -> Result<(), String> {
        let saved = self.take(name)?;
        if saved.size() != live.size() {
            return Err(format!(
                "`{name}` has shape {:?}, {what} {:?}",
                saved.size(),
                live.size()
            ));
        }
        live.f_copy_(&saved).map_err(|e| format!("`{name}`: {e}"))
    }

    /// A tensor nothing restored, if any is left.
    pub fn leftover(&self) -> Option<&str> {
        self.0.keys().next().map(String::as_str)
    }
}
