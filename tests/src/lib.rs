//! The end-to-end suite lives in `e2e/`.
