//! tether sim
