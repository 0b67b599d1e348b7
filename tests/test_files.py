"""gpgan.files' writers: atomic_write, staged_folder and replaced_folder leave the old content or the new, never a
part, name the user's path in their errors, and give new files and folders the umask's mode."""
import errno
import os
import stat
import subprocess
import sys
import tempfile

import pytest

from gpgan.files import FileLock, LockHeld, append_text, atomic_write, is_temporary, replaced_folder, staged_folder


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "deep" / "out.txt"
    atomic_write(target, "first")
    atomic_write(target, b"second")
    atomic_write(target, lambda f: f.write(b"third"))
    assert target.read_bytes() == b"third"
    assert os.listdir(target.parent) == ["out.txt"]
    assert _mode(target) == 0o666 & ~_umask()


def test_a_failed_atomic_write_keeps_the_old_file_and_names_the_target(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write(target, "old")

    def full_disk(f):
        f.write(b"par")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as caught:
        atomic_write(target, full_disk)
    assert caught.value.filename == str(target)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


def test_a_temporary_that_cannot_be_made_is_said_of_the_target(tmp_path, monkeypatch):
    def refused(dir, prefix, suffix):  # as a read-only folder refuses it, naming the temporary
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(dir, prefix + "abc" + suffix))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    for write in (lambda path: atomic_write(path, "x"), lambda path: staged_folder(path).__enter__()):
        with pytest.raises(PermissionError) as caught:
            write(tmp_path / "x")
        assert caught.value.filename == str(tmp_path / "x")
    assert os.listdir(tmp_path) == []


def test_staged_folder_moves_everything_in_at_the_end(tmp_path):
    out = tmp_path / "pngs"
    with staged_folder(out) as staging:
        assert not out.exists() and is_temporary(os.path.basename(staging))
        for name in ("a.png", "b.png"):
            (tmp_path / staging / name).write_text(name)
    assert sorted(os.listdir(out)) == ["a.png", "b.png"] and os.listdir(tmp_path) == ["pngs"]
    assert _mode(out) == 0o777 & ~_umask()
    with staged_folder(out) as staging:  # into a folder that exists: its other files stay
        (tmp_path / staging / "b.png").write_text("new b")
        (tmp_path / staging / "c.png").write_text("c")
    assert sorted(os.listdir(out)) == ["a.png", "b.png", "c.png"] and (out / "b.png").read_text() == "new b"
    assert os.listdir(tmp_path) == ["pngs"]


def test_a_failed_staged_folder_leaves_the_folder_as_it_was_and_names_the_files_place(tmp_path):
    out = tmp_path / "pngs"
    out.mkdir()
    (out / "keep.png").write_text("keep")
    with pytest.raises(OSError) as caught:
        with staged_folder(out) as staging:
            (tmp_path / staging / "000000.png").write_text("x")
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(staging, "000001.png"))
    assert caught.value.filename == os.path.join(out, "000001.png")
    assert os.listdir(out) == ["keep.png"] and os.listdir(tmp_path) == ["pngs"]
    with pytest.raises(OSError) as caught:
        with staged_folder(out):
            raise OSError(errno.EIO, "Input/output error")
    assert caught.value.filename == str(out)
    with pytest.raises(ValueError):  # not an OSError: passed on as it is, nothing left behind
        with staged_folder(tmp_path / "other"):
            raise ValueError("stop")
    assert sorted(os.listdir(tmp_path)) == ["pngs"]


def test_a_failed_write_removes_the_folders_it_made_and_keeps_those_that_were_there(tmp_path):
    (tmp_path / "kept").mkdir()

    def interrupted(f):
        raise KeyboardInterrupt  # Ctrl-C mid-write, as a full disk would stop it

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "kept" / "a" / "b" / "out.txt", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with staged_folder(tmp_path / "kept" / "o" / "dd") as staging:
            (tmp_path / staging / "0.png").write_text("x")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["kept"] and os.listdir(tmp_path / "kept") == []
    # A folder that gained another file meanwhile stays (and so do those above it).
    with pytest.raises(OSError):
        with staged_folder(tmp_path / "kept" / "o" / "dd"):
            (tmp_path / "kept" / "o" / "other.txt").write_text("other")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert os.listdir(tmp_path / "kept" / "o") == ["other.txt"]


def test_a_folder_removed_by_another_writers_rollback_is_made_again(tmp_path, monkeypatch):
    # Two writers into one new folder: the first makes it, the second finds it there, then the
    # first's failed write removes it again (still empty) just before the second creates its
    # temporary in it. The second must make it again and write, not fail on a missing folder.
    def fill_staged(path):
        with staged_folder(path) as staging:
            open(os.path.join(staging, "0.png"), "w").close()

    for name, make in (("mkstemp", lambda path: atomic_write(path, "x")), ("mkdtemp", fill_staged)):
        real = getattr(tempfile, name)
        removed = []

        def after_a_rollback(dir, prefix, suffix, real=real, removed=removed):
            if not removed:
                os.rmdir(dir)  # the other writer's remove_empty_folders
                removed.append(dir)
            return real(dir=dir, prefix=prefix, suffix=suffix)

        monkeypatch.setattr(tempfile, name, after_a_rollback)
        target = tmp_path / name / "new" / "out"
        make(target)
        assert removed == [str(target.parent)] and target.exists()


def test_replaced_folder_swaps_the_whole_folder_or_leaves_it(tmp_path):
    out = tmp_path / "records"
    with replaced_folder(out) as staging:
        assert not out.exists() and is_temporary(os.path.basename(staging))
        os.makedirs(os.path.join(staging, "runs"))
        (tmp_path / staging / "runs" / "a.json").write_text("a")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["runs", "runs/a.json"]
    with replaced_folder(out) as staging:  # the old folder's files go with it
        (tmp_path / staging / "b.json").write_text("b")
    assert os.listdir(out) == ["b.json"] and os.listdir(tmp_path) == ["records"]
    for failure in (OSError(errno.ENOSPC, "No space left on device"), ValueError("stop")):
        with pytest.raises(type(failure)):
            with replaced_folder(out) as staging:
                (tmp_path / staging / "c.json").write_text("c")
                raise failure
        assert os.listdir(out) == ["b.json"] and os.listdir(tmp_path) == ["records"]


def test_replaced_folder_puts_the_old_folder_back_when_the_new_cannot_take_its_place(tmp_path, monkeypatch):
    out = tmp_path / "records"
    out.mkdir()
    (out / "old.json").write_text("old")
    real_rename = os.rename

    def rename(src, dst):
        if os.fspath(dst) == os.fspath(out) and "old" not in os.listdir(src)[0]:
            raise OSError(errno.EIO, "Input/output error", os.fspath(dst))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError):
        with replaced_folder(out) as staging:
            (tmp_path / staging / "new.json").write_text("new")
    assert os.listdir(out) == ["old.json"] and os.listdir(tmp_path) == ["records"]


def test_replaced_folder_refuses_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep.json").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="is a symbolic link"):
        with replaced_folder(tmp_path / "link"):
            pass
    assert os.listdir(tmp_path / "real") == ["keep.json"] and sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_append_text_cut_short_by_a_full_disk_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    append_text(path, '{"step": 1}\n')
    real_write = os.write

    def half_then_full(fd, data):  # the disk fills half-way through the record
        if len(data) > 4:
            return real_write(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError) as caught:
        append_text(path, '{"step": 2, "loss": 0.5}\n')
    assert caught.value.filename == str(path) and caught.value.errno == errno.ENOSPC
    assert path.read_text() == '{"step": 1}\n'
    monkeypatch.setattr(os, "write", real_write)
    append_text(path, '{"step": 2}\n')
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_a_file_lock_has_one_holder_and_names_it_to_the_others(tmp_path):
    path = tmp_path / ".lock"
    first, second = FileLock(path), FileLock(path)
    first.acquire()
    first.acquire()  # again by its holder: nothing changes
    with pytest.raises(LockHeld) as caught:
        second.acquire()  # refused even in this process: the lock belongs to an open file
    assert caught.value.pid == os.getpid() and not second.held
    first.release()
    with second:
        assert second.held
    assert not second.held


def test_a_file_lock_is_let_go_when_its_process_ends(tmp_path):
    # No stale lock is ever left: a holder killed outright (SIGKILL, no clean-up) releases it.
    path = tmp_path / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from gpgan.files import FileLock; "
                               f"lock = FileLock({str(path)!r}); lock.acquire(); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as caught:
            FileLock(path).acquire()
        assert caught.value.pid == holder.pid
    finally:
        holder.kill()
        holder.wait()
    with FileLock(path) as lock:
        assert lock.held


def test_a_file_lock_in_a_read_only_folder_is_taken_read_only_or_not_at_all(tmp_path, monkeypatch):
    # As root the test cannot make a folder unwritable, so os.open refuses as a read-only mount
    # would: an existing lock file is locked through a read-only descriptor (flock needs no
    # write), and without one there is no lock, and no error (a finished run still answers).
    path = tmp_path / ".lock"
    real_open = os.open

    def read_only_mount(p, flags, *args):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", p)
        return real_open(p, flags, *args)

    monkeypatch.setattr(os, "open", read_only_mount)
    lock = FileLock(path)
    lock.acquire()
    assert not lock.held and not path.exists()
    monkeypatch.undo()
    path.write_text("")
    monkeypatch.setattr(os, "open", read_only_mount)
    with FileLock(path) as lock:
        assert lock.held
        monkeypatch.undo()
        with pytest.raises(LockHeld) as caught:
            FileLock(path).acquire()
        assert caught.value.pid is None  # (nothing could be written there to name it)


def test_a_lock_file_removed_by_its_holder_is_not_held_twice(tmp_path):
    # A holder may remove the lock file (a stale run folder removed whole under its lock). A
    # process that opened the old file before and locks it after finds it is no longer the
    # path's file and locks the path's new one, so a third process is refused, not admitted too.
    path = tmp_path / ".lock"
    holder, late = FileLock(path), FileLock(path)
    holder.acquire()
    opened_before = os.open(path, os.O_RDWR)
    os.remove(path)
    holder.release()
    opens = []
    real_open = late._open
    late._open = lambda: opens.append(1) or ((opened_before, True) if len(opens) == 1 else real_open())
    late.acquire()
    assert late.held and len(opens) == 2 and path.exists()
    with pytest.raises(LockHeld):
        FileLock(path).acquire()
    late.release()
