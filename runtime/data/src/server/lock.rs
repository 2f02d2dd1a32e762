//! Locking the server's shared tables (its trainers, its connections), whichever module holds
//! them: one rule for a poisoned lock, in one place.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `mutex`, whether or not a panicking call poisoned it: every value kept behind these
/// locks is whole between statements, so one failed call must not fail every later one.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
