//! A conformance suite every [`Vfs`] implementation must pass: the
//! contract in the module docs of [`super`], checked once and run against
//! the real-file, in-memory and simulated implementations.
#![cfg(test)]

use std::io;

use super::{OpenMode, Vfs};

pub fn write_read_round_trip(vfs: &dyn Vfs) {
    let f = vfs.open("a", OpenMode::CreateNew).unwrap();
    f.write_at(0, b"hello world").unwrap();
    f.write_at(6, b"there").unwrap();
    let mut buf = [0u8; 11];
    f.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello there");
    assert_eq!(f.len().unwrap(), 11);
    f.sync_data().unwrap();
}

pub fn write_past_end_zero_fills(vfs: &dyn Vfs) {
    let f = vfs.open("a", OpenMode::CreateNew).unwrap();
    f.write_at(10, b"x").unwrap();
    let mut buf = [1u8; 11];
    f.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..10], &[0u8; 10]);
    assert_eq!(buf[10], b'x');
}

pub fn read_past_eof_is_unexpected_eof(vfs: &dyn Vfs) {
    let f = vfs.open("a", OpenMode::CreateNew).unwrap();
    f.write_at(0, b"abc").unwrap();
    let mut buf = [0u8; 4];
    let err = f.read_at(0, &mut buf).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    let err = f.read_at(100, &mut buf[..1]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
}

pub fn vectored_write_equals_concatenation(vfs: &dyn Vfs) {
    let f = vfs.open("a", OpenMode::CreateNew).unwrap();
    // More buffers than IOV_MAX, of varied sizes including empty ones.
    let owned: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| vec![(i % 251) as u8; (i % 7) as usize])
        .collect();
    let bufs: Vec<&[u8]> = owned.iter().map(|b| b.as_slice()).collect();
    f.write_vectored_at(5, &bufs).unwrap();
    let expected: Vec<u8> = owned.concat();
    let mut got = vec![0u8; expected.len()];
    f.read_at(5, &mut got).unwrap();
    assert_eq!(got, expected);
    assert_eq!(f.len().unwrap(), 5 + expected.len() as u64);
}

pub fn set_len_truncates_and_extends(vfs: &dyn Vfs) {
    let f = vfs.open("a", OpenMode::CreateNew).unwrap();
    f.write_at(0, b"abcdef").unwrap();
    f.set_len(3).unwrap();
    assert_eq!(f.len().unwrap(), 3);
    f.set_len(6).unwrap();
    let mut buf = [9u8; 6];
    f.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"abc\0\0\0");
}

pub fn open_modes(vfs: &dyn Vfs) {
    let err = vfs.open("a", OpenMode::Existing).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    vfs.open("a", OpenMode::CreateNew)
        .unwrap()
        .write_at(0, b"keep")
        .unwrap();
    let err = vfs.open("a", OpenMode::CreateNew).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    // OpenOrCreate does not truncate.
    let f = vfs.open("a", OpenMode::OpenOrCreate).unwrap();
    assert_eq!(f.len().unwrap(), 4);
    vfs.open("b", OpenMode::OpenOrCreate).unwrap();
    assert!(vfs.exists("b").unwrap());
}

pub fn bad_names_are_rejected(vfs: &dyn Vfs) {
    for name in ["", ".", "..", "a/b", "../x"] {
        let err = vfs.open(name, OpenMode::OpenOrCreate).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{name:?}");
    }
}

pub fn lock_is_exclusive_until_dropped(vfs: &dyn Vfs) {
    let guard = vfs.lock("db.lock").unwrap();
    let err = vfs.lock("db.lock").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    // A different name is independent.
    let other = vfs.lock("other.lock").unwrap();
    drop(guard);
    let again = vfs.lock("db.lock").unwrap();
    drop(again);
    drop(other);
}

pub fn rename_moves_and_never_replaces(vfs: &dyn Vfs) {
    vfs.open("a", OpenMode::CreateNew)
        .unwrap()
        .write_at(0, b"aaa")
        .unwrap();
    vfs.open("b", OpenMode::CreateNew)
        .unwrap()
        .write_at(0, b"b")
        .unwrap();
    let err = vfs.rename("a", "b").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(vfs.open("b", OpenMode::Existing).unwrap().len().unwrap(), 1);
    vfs.remove("b").unwrap();
    vfs.rename("a", "b").unwrap();
    assert!(!vfs.exists("a").unwrap());
    assert_eq!(vfs.open("b", OpenMode::Existing).unwrap().len().unwrap(), 3);
    vfs.rename("b", "c").unwrap();
    assert_eq!(vfs.list().unwrap(), ["c"]);
    let err = vfs.rename("missing", "d").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    let err = vfs.rename("c", "x/y").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    vfs.sync_dir().unwrap();
}

/// A hole reads as zeros and keeps the length; a range past the end
/// changes nothing. (A `Vfs` that cannot punch holes says `Unsupported`
/// and changes nothing.)
pub fn punched_hole_reads_zeros(vfs: &dyn Vfs) {
    let f = vfs.open("a", OpenMode::CreateNew).unwrap();
    let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 200 + 1) as u8).collect();
    f.write_at(0, &data).unwrap();
    if let Err(e) = f.punch_hole(4096, 4096) {
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        let mut buf = vec![0u8; data.len()];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, data);
        return;
    }
    f.punch_hole(2 * 4096 + 100, 1 << 20).unwrap();
    f.punch_hole(1 << 30, 4096).unwrap();
    assert_eq!(f.len().unwrap(), data.len() as u64);
    let mut buf = vec![0u8; data.len()];
    f.read_at(0, &mut buf).unwrap();
    assert_eq!(buf[..4096], data[..4096]);
    assert!(buf[4096..2 * 4096].iter().all(|&b| b == 0));
    assert_eq!(
        buf[2 * 4096..2 * 4096 + 100],
        data[2 * 4096..2 * 4096 + 100]
    );
    assert!(buf[2 * 4096 + 100..].iter().all(|&b| b == 0));
    f.sync_data().unwrap();
    // Written again, the range holds the new bytes.
    f.write_at(4096, &data[..4096]).unwrap();
    f.read_at(4096, &mut buf[..4096]).unwrap();
    assert_eq!(buf[..4096], data[..4096]);
}

/// Runs every check, each on a fresh directory from `new_vfs`.
pub fn run_all(new_vfs: &dyn Fn() -> Box<dyn Vfs>) {
    write_read_round_trip(&*new_vfs());
    write_past_end_zero_fills(&*new_vfs());
    read_past_eof_is_unexpected_eof(&*new_vfs());
    vectored_write_equals_concatenation(&*new_vfs());
    set_len_truncates_and_extends(&*new_vfs());
    open_modes(&*new_vfs());
    bad_names_are_rejected(&*new_vfs());
    lock_is_exclusive_until_dropped(&*new_vfs());
    rename_moves_and_never_replaces(&*new_vfs());
    punched_hole_reads_zeros(&*new_vfs());
}
