//! The server emulator (filled in below).
