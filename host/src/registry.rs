//! Hook registry.
