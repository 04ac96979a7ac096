//! tether client
