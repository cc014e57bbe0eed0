//! MOUNT version 3: MNT of "/" and of the export path, refusals, the
//! bounded mount list, EXPORT.

mod common;

use common::*;
use nfs3::mount::{Dirpath, Exports, Mountlist, Mountres3};
use nfs3::{decode_payload, MountArgs, Mountstat3};
use oncrpc::AuthSys;

fn mnt_res(p: &oncrpc::Payload) -> Mountres3 {
    decode_payload(p).unwrap()
}

#[tokio::test]
async fn mnt_dump_umnt_export() {
    let fx = Fx::new();
    std::fs::create_dir(fx.path("sub")).unwrap();
    let export_path = fx.root.to_str().unwrap().to_string();
    for path in [
        "/".to_string(),
        export_path.clone(),
        format!("{export_path}/"),
    ] {
        for cred in [root(), oncrpc::Credential::None] {
            let r = mnt_res(
                &fx.mount(&cred, MountArgs::Mnt(Dirpath::from(path.as_str())))
                    .await,
            );
            let Mountres3::Ok(ok) = r else {
                panic!("{path}: {r:?}")
            };
            assert_eq!(ok.fhandle, fx.root_fh());
            assert!(ok.auth_flavors.contains(&1) && ok.auth_flavors.contains(&0));
        }
    }
    let r = mnt_res(
        &fx.mount(&root(), MountArgs::Mnt(Dirpath::from("/etc")))
            .await,
    );
    assert_eq!(r.status(), Mountstat3::Noent);
    let r = mnt_res(
        &fx.mount(
            &root(),
            MountArgs::Mnt(Dirpath::from(format!("{export_path}/sub").as_str())),
        )
        .await,
    );
    assert_eq!(r.status(), Mountstat3::Acces);
    let r = mnt_res(
        &fx.mount(
            &root(),
            MountArgs::Mnt(Dirpath::from(format!("{export_path}/../outside").as_str())),
        )
        .await,
    );
    assert_eq!(r.status(), Mountstat3::Acces);

    let dump: Mountlist = decode_payload(&fx.mount(&root(), MountArgs::Dump).await).unwrap();
    assert!(dump
        .0
        .iter()
        .any(|m| m.ml_hostname.as_bytes() == b"testhost" && m.ml_directory.as_bytes() == b"/"));
    fx.mount(&root(), MountArgs::Umnt(Dirpath::from("/"))).await;
    let dump: Mountlist = decode_payload(&fx.mount(&root(), MountArgs::Dump).await).unwrap();
    assert!(!dump
        .0
        .iter()
        .any(|m| m.ml_hostname.as_bytes() == b"testhost" && m.ml_directory.as_bytes() == b"/"));
    assert!(dump
        .0
        .iter()
        .any(|m| m.ml_hostname.as_bytes() == b"testhost"));
    fx.mount(&root(), MountArgs::Umntall).await;
    let dump: Mountlist = decode_payload(&fx.mount(&root(), MountArgs::Dump).await).unwrap();
    assert!(!dump
        .0
        .iter()
        .any(|m| m.ml_hostname.as_bytes() == b"testhost"));

    let ex: Exports = decode_payload(&fx.mount(&root(), MountArgs::Export).await).unwrap();
    assert_eq!(ex.0.len(), 1);
    assert_eq!(ex.0[0].ex_dir.as_bytes(), export_path.as_bytes());
    fx.raw(nfs3::MOUNT_PROGRAM, 3, 0, oncrpc::Payload::new(), &root())
        .await
        .unwrap();
    let e = fx
        .raw(nfs3::MOUNT_PROGRAM, 3, 9, oncrpc::Payload::new(), &root())
        .await;
    assert!(matches!(e, Err(oncrpc::RpcError::ProcUnavail)));
}

#[tokio::test]
async fn the_mount_list_is_bounded() {
    let fx = Fx::new();
    for i in 0..(nfs3_server::mount::MAX_MOUNT_LIST + 100) {
        let cred =
            oncrpc::Credential::Sys(AuthSys::new(0, format!("host{i}"), 0, 0, vec![]).unwrap());
        fx.mount(&cred, MountArgs::Mnt(Dirpath::from("/"))).await;
    }
    let dump: Mountlist = decode_payload(&fx.mount(&root(), MountArgs::Dump).await).unwrap();
    assert_eq!(dump.0.len(), nfs3_server::mount::MAX_MOUNT_LIST);
    assert!(dump.0.iter().any(|m| m.ml_hostname.as_bytes()
        == format!("host{}", nfs3_server::mount::MAX_MOUNT_LIST + 99).as_bytes()));
    assert!(!dump.0.iter().any(|m| m.ml_hostname.as_bytes() == b"host0"));
}
