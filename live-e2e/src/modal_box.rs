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
