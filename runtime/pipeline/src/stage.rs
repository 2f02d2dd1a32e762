//! Custom stages: a trait a launcher crate implements and a registry that finds them by name.
//!
//! A spec names a custom stage as `{ op = "custom", name = "my_stage", params = { ... } }`; the
//! rendered launcher's `main.rs` registers a factory under that name, and the engine builds
//! the stage from its params once, at start-up, so bad params fail before any data moves.

use std::collections::BTreeMap;

use crate::{BoxError, Image, SampleRng};

/// A custom stage's parameters, as written in the spec.
pub type Params = BTreeMap<String, serde_json::Value>;

/// One pipeline stage: an image in, an image out.
///
/// Draw randomness only from `rng` (seeded per sample and epoch) so the output does not depend
/// on which server or thread ran the sample.
pub trait Stage: Send + Sync {
    /// Transform one sample.
    fn apply(&self, image: Image, rng: &mut SampleRng) -> Result<Image, BoxError>;
}

/// Builds a stage from its params.
pub type StageFactory = Box<dyn Fn(&Params) -> Result<Box<dyn Stage>, BoxError> + Send + Sync>;

/// Custom stages by name.
pub struct StageRegistry {
    factories: BTreeMap<String, StageFactory>,
}

impl StageRegistry {
    /// A registry without any custom stage.
    pub fn empty() -> Self {
        Self {
            factories: BTreeMap::new(),
        }
    }

    /// The stages hetgen ships as examples of the trait: `invert` (255 − v, no params).
    pub fn builtin() -> Self {
        let mut registry = Self::empty();
        registry.register("invert", |params| {
            if let Some(key) = params.keys().next() {
                return Err(format!("takes no params, got `{key}`").into());
            }
            Ok(Box::new(Invert))
        });
        registry
    }

    /// Register (or replace) the stage `name`.
    pub fn register<F>(&mut self, name: &str, factory: F) -> &mut Self
    where
        F: Fn(&Params) -> Result<Box<dyn Stage>, BoxError> + Send + Sync + 'static,
    {
        self.factories.insert(name.to_owned(), Box::new(factory));
        self
    }

    /// Build the stage `name` from `params`; `None` when it is not registered.
    pub fn build(&self, name: &str, params: &Params) -> Option<Result<Box<dyn Stage>, BoxError>> {
        self.factories.get(name).map(|f| f(params))
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.factories.keys().map(String::as_str).collect()
    }
}

struct Invert;

impl Stage for Invert {
    fn apply(&self, mut image: Image, _rng: &mut SampleRng) -> Result<Image, BoxError> {
        image.data.iter_mut().for_each(|v| *v = 255 - *v);
        Ok(image)
    }
}
