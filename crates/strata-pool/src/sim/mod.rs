//! The scale simulator.
