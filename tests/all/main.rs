//! integration tests
mod sandbox_hostile;
