//! Builds the two C parts the binary embeds: the spawner (spawner/spawn.c, a small static
//! executable between memtrial and the workload, so a small program's peak is its own) and
//! the allocator probe (probe-shim/shim.c, a shared library preloaded into the run). Both
//! are required: without a C compiler the build fails and says what to install, rather
//! than producing a memtrial whose figures differ (scripts/setup.sh installs gcc and
//! libc6-dev).
//!
//! It also checks the library's layering (build/layers.rs): a module that uses a module
//! of its own or a higher layer fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/layers.rs"]
mod layers;

const INSTALL: &str = "install a C compiler and libc headers (Debian: apt-get install -y gcc \
                       libc6-dev; scripts/setup.sh does it) and build again";

fn main() {
    println!("cargo:rerun-if-changed=spawner/spawn.c");
    println!("cargo:rerun-if-changed=probe-shim/shim.c");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build/layers.rs");
    let wrong = layers::violations(Path::new("src"));
    if !wrong.is_empty() {
        panic!(
            "the library's layering is broken:\n  {}",
            wrong.join("\n  ")
        );
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    build_probe_shim(&out);
    build_spawner(&out);
}

/// What a failed compiler run said, for the build's error.
fn run(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {:?}: {e}", cmd.get_program())),
    }
}

/// The allocator probe: a shared library memtrial embeds and preloads into a run's
/// processes.
fn build_probe_shim(out: &Path) {
    let lib = out.join("libmemtrial-probe.so");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let mut cmd = compiler.to_command();
    // One read-execute segment instead of three: fewer pages of the probe in a small
    // program's RSS.
    cmd.args(["-shared", "-fPIC", "-O2", "-pthread", "-Wall"])
        .arg("-Wl,-z,noseparate-code")
        .arg("-o")
        .arg(&lib)
        .arg("probe-shim/shim.c")
        .arg("-ldl");
    if let Err(e) = run(&mut cmd) {
        panic!("cannot build the allocator probe (probe-shim/shim.c): {e}\n{INSTALL}");
    }
}

/// The spawner: static (no loader, fewest private pages), or dynamic where libc.a is
/// missing.
fn build_spawner(out: &Path) {
    let exe = out.join("memtrial-spawn");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let mut errors = Vec::new();
    for extra in [&["-static"][..], &[][..]] {
        let mut cmd = compiler.to_command();
        cmd.args(extra)
            .arg("-Os")
            .arg("-o")
            .arg(&exe)
            .arg("spawner/spawn.c");
        match run(&mut cmd) {
            Ok(()) => {
                let linkage = if extra.is_empty() {
                    "dynamic"
                } else {
                    "static"
                };
                println!("cargo:rustc-env=MEMTRIAL_SPAWNER_LINKAGE={linkage}");
                return;
            }
            Err(e) => errors.push(e),
        }
    }
    panic!(
        "cannot build the spawner (spawner/spawn.c): {}\n{INSTALL}",
        errors.join("; ")
    );
}
