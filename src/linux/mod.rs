//! OS-facing readers: `/proc`, ELF files, the host.

pub mod allocator;
pub mod cgroup;
pub use cgroup::container;
pub(crate) mod child;
pub mod elf;
pub mod glibc_heap;
pub mod glibc_malloc;
pub mod host;
pub mod kept;
pub mod ldso;
pub mod maps;
pub mod perf;
pub mod proc;
pub mod regions;
pub mod safe_file;
pub mod symbols;
pub mod thp;
