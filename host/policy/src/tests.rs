//! Tests on tiny random models.
