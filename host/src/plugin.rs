//! Plugin discovery and loading.
