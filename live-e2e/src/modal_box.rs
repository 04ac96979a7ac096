//! A throwaway Modal sandbox (Debian slim, with python3), created through
//! Modal's Python client and terminated when dropped. Needs credentials
//! ([`crate::backends::modal`]) and a python3 that can `import modal`
//! (`$TETHER_MODAL_PYTHON`, else `python3`).

use std::process::Command;

/// A running Modal sandbox.
#[derive(Debug)]
pub struct ModalBox {
    /// Its object id (`sb-…`).
    pub id: String,
    python: String,
}

impl ModalBox {
    /// Creates one in the app `tether-live`.
    ///
    /// # Panics
    ///
    /// When Modal refuses.
    pub fn create() -> ModalBox {
        let python = std::env::var("TETHER_MODAL_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = Command::new(&python)
            .args([
                "-c",
                "import modal\n\
                 app = modal.App.lookup('tether-live', create_if_missing=True)\n\
                 sb = modal.Sandbox.create(app=app, image=modal.Image.debian_slim(), timeout=900)\n\
                 print(sb.object_id)",
            ])
            .output()
            .expect("run python3 for modal");
        assert!(
            out.status.success(),
            "cannot create a Modal sandbox: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        ModalBox { id, python }
    }

    /// The backend spec that reaches it.
    pub fn spec(&self) -> String {
        format!("modal:{}?python={}", self.id, self.python)
    }
}

impl Drop for ModalBox {
    fn drop(&mut self) {
        let _ = Command::new(&self.python)
            .args([
                "-c",
                &format!(
                    "import modal\nmodal.Sandbox.from_id({:?}).terminate()",
                    self.id
                ),
            ])
            .status();
    }
}

/// The stand-in Modal of the client's tests
/// (`client/tests/fixtures/modal-standin`: Modal's Python client as far as
/// the bridge uses it, running local processes): a sandbox directory, an
/// interpreter wrapper that puts the stand-in on `PYTHONPATH`, and a root
/// for the agent. Needs python3.
#[derive(Debug)]
pub struct ModalStandIn {
    dir: tempfile::TempDir,
}

impl ModalStandIn {
    /// A fresh one with the sandbox `sb-live`.
    ///
    /// # Panics
    ///
    /// When the temporary files cannot be made.
    pub fn new() -> ModalStandIn {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("tether-live-modal")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(dir.path().join("sandboxes/sb-live")).expect("sandbox dir");
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../client/tests/fixtures/modal-standin");
        let python = dir.path().join("python");
        std::fs::write(
            &python,
            format!(
                "#!/bin/sh\nPYTHONPATH='{}' TETHER_MODAL_STANDIN='{}' exec python3 \"$@\"\n",
                fixtures.display(),
                dir.path().join("sandboxes").display()
            ),
        )
        .expect("write the python wrapper");
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755))
            .expect("chmod the python wrapper");
        ModalStandIn { dir }
    }

    /// The backend spec that reaches its sandbox.
    pub fn spec(&self) -> String {
        format!(
            "modal:sb-live?python={}",
            self.dir.path().join("python").display()
        )
    }

    /// A root for the agent (on this machine, as the stand-in's sandbox is).
    pub fn root(&self) -> String {
        self.dir.path().join("root").display().to_string()
    }

    /// Python processes that imported the stand-in (bridges started).
    pub fn imports(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("sandboxes/imports.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

impl Default for ModalStandIn {
    fn default() -> Self {
        ModalStandIn::new()
    }
}
