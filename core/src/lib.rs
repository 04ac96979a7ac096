//! tether-core
