//! SQLite adapter (through rusqlite, bundled SQLite).
//!
//! Layout: one database file `sqlite.db` in WAL mode; table `t` is the SQL
//! table `kv{t}(key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID`. All writes
//! go through one connection behind a mutex (how an application shares one
//! SQLite writer between threads), so writers on different tables serialise.
//! Each reader thread gets its own connection, as WAL mode allows readers to
//! run beside the writer. Every statement is prepared once and cached
//! (`prepare_cached`).
//!
//! Durability: durable transactions run with `PRAGMA synchronous=FULL`
//! (in WAL mode the WAL is fsynced at every commit); no-sync transactions
//! with `synchronous=OFF` (no fsync at all). The pragma is switched only
//! when the mode changes, under the writer mutex, between transactions.
//!
//! Compaction: `VACUUM`, then `PRAGMA wal_checkpoint(TRUNCATE)` so the WAL
//! file shrinks too.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use super::{
    copy_into, table_name, Backup, Compaction, Engine, EngineKind, KvRef, OpenOptions, Reader,
    Result, Snapshot, SyncMode, TableId, WriterLayout,
};

/// SQL text of one table's statements (the cache key of `prepare_cached`).
struct TableSql {
    insert: String,
    delete: String,
    get: String,
    range: String,
    count: String,
    pop_first: String,
}

impl TableSql {
    fn new(name: &str) -> Self {
        TableSql {
            insert: format!("INSERT OR REPLACE INTO {name}(key, value) VALUES (?1, ?2)"),
            delete: format!("DELETE FROM {name} WHERE key = ?1"),
            get: format!("SELECT value FROM {name} WHERE key = ?1"),
            range: format!("SELECT key, value FROM {name} WHERE key >= ?1 ORDER BY key LIMIT ?2"),
            count: format!("SELECT COUNT(*) FROM {name}"),
            pop_first: format!(
                "DELETE FROM {name} WHERE key = (SELECT min(key) FROM {name}) RETURNING key"
            ),
        }
    }
}

struct Writer {
    conn: Connection,
    mode: SyncMode,
}

/// An open SQLite database.
pub struct SqliteEngine {
    dir: PathBuf,
    path: PathBuf,
    writer: Mutex<Writer>,
    sql: Vec<TableSql>,
}

fn create_table_sql(name: &str) -> String {
    format!("CREATE TABLE IF NOT EXISTS {name}(key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID")
}

fn set_synchronous(conn: &Connection, mode: SyncMode) -> Result<()> {
    let value = match mode {
        SyncMode::Durable => "FULL",
        SyncMode::NoSync => "OFF",
        SyncMode::Relaxed => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", value)?;
    Ok(())
}

fn open_writer(path: &Path, tables: usize) -> Result<Connection> {
    let conn = Connection::open(path)?;
    let journal: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !journal.eq_ignore_ascii_case("wal") {
        return Err(format!("sqlite refused WAL mode (got {journal})").into());
    }
    set_synchronous(&conn, SyncMode::Durable)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    for t in 0..tables {
        conn.execute_batch(&create_table_sql(&table_name(t)))?;
    }
    Ok(conn)
}

impl SqliteEngine {
    /// Opens (or creates) `dir/sqlite.db` in WAL mode with every table.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Self> {
        let path = dir.join("sqlite.db");
        let conn = open_writer(&path, opts.tables)?;
        let sql = (0..opts.tables)
            .map(|t| TableSql::new(&table_name(t)))
            .collect();
        Ok(SqliteEngine {
            dir: dir.to_path_buf(),
            path,
            writer: Mutex::new(Writer {
                conn,
                mode: SyncMode::Durable,
            }),
            sql,
        })
    }

    /// Runs `f` in one transaction on the writer connection with `mode`.
    fn write(&self, mode: SyncMode, f: impl FnOnce(&Connection) -> Result<()>) -> Result<()> {
        let mut w = self.writer.lock().map_err(|_| "sqlite writer poisoned")?;
        if w.mode != mode {
            set_synchronous(&w.conn, mode)?;
            w.mode = mode;
        }
        let tx = w.conn.transaction()?;
        f(&tx)?;
        tx.commit()?;
        Ok(())
    }
}

impl Engine for SqliteEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Sqlite
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn bulk_load(&self, table: TableId, pairs: &[KvRef<'_>]) -> Result<()> {
        self.insert_txn(table, pairs, SyncMode::Durable)
    }

    fn insert_txn(&self, table: TableId, batch: &[KvRef<'_>], mode: SyncMode) -> Result<()> {
        let sql = &self.sql[table.0].insert;
        self.write(mode, |conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            for &(k, v) in batch {
                stmt.execute(params![k, v])?;
            }
            Ok(())
        })
    }

    fn remove_txn(&self, table: TableId, keys: &[&[u8]], mode: SyncMode) -> Result<()> {
        let sql = &self.sql[table.0].delete;
        self.write(mode, |conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            for &k in keys {
                stmt.execute(params![k])?;
            }
            Ok(())
        })
    }

    fn pop_first_txn(&self, table: TableId, mode: SyncMode, key: &mut Vec<u8>) -> Result<bool> {
        let sql = &self.sql[table.0].pop_first;
        let mut found = false;
        self.write(mode, |conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            let mut rows = stmt.query([])?;
            if let Some(row) = rows.next()? {
                copy_into(key, row.get_ref(0)?.as_blob()?);
                found = true;
            }
            Ok(())
        })?;
        Ok(found)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        let conn = Connection::open(&self.path)?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        Ok(Box::new(SqliteReader {
            conn,
            sql: &self.sql,
        }))
    }

    fn len(&self, table: TableId) -> Result<u64> {
        let w = self.writer.lock().map_err(|_| "sqlite writer poisoned")?;
        let mut stmt = w.conn.prepare_cached(&self.sql[table.0].count)?;
        let n: i64 = stmt.query_row([], |r| r.get(0))?;
        Ok(u64::try_from(n)?)
    }

    /// The online backup API (`sqlite3_backup_*`, all pages in one step)
    /// from a connection of its own, into `dest/backup.sqlite`.
    fn backup(&self, dest: &Path) -> Result<Backup> {
        let src = Connection::open(&self.path)?;
        src.busy_timeout(std::time::Duration::from_secs(30))?;
        let mut dst = Connection::open(dest.join("backup.sqlite"))?;
        let b = rusqlite::backup::Backup::new(&src, &mut dst)?;
        // -1: every remaining page in one step; retried while busy.
        loop {
            match b.step(-1)? {
                rusqlite::backup::StepResult::Done => return Ok(Backup::Done),
                _ => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }

    fn compact(&mut self) -> Result<Compaction> {
        let w = self
            .writer
            .get_mut()
            .map_err(|_| "sqlite writer poisoned")?;
        w.conn.execute_batch("VACUUM")?;
        w.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(Compaction::Done)
    }

    fn create_table(&self, name: &str) -> Result<()> {
        let sql = create_table_sql(name);
        self.write(SyncMode::Durable, |conn| {
            conn.execute_batch(&sql)?;
            Ok(())
        })
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        let sql = format!("DROP TABLE {name}");
        self.write(SyncMode::Durable, |conn| {
            conn.execute_batch(&sql)?;
            Ok(())
        })
    }

    fn writer_layout(&self) -> WriterLayout {
        WriterLayout::PerWriter(
            "one SQL table per writer in one file; one writer connection, writers serialise",
        )
    }
}

struct SqliteReader<'e> {
    conn: Connection,
    sql: &'e [TableSql],
}

fn read_into(conn: &Connection, sql: &str, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
    let mut stmt = conn.prepare_cached(sql)?;
    let found = stmt
        .query_row(params![key], |r| {
            let v = r.get_ref(0)?.as_blob()?;
            copy_into(out, v);
            Ok(())
        })
        .optional()?;
    Ok(found.is_some())
}

impl Reader for SqliteReader<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        // An autocommit SELECT is its own read transaction (one snapshot).
        read_into(&self.conn, &self.sql[table.0].get, key, out)
    }

    fn snapshot(&mut self) -> Result<Box<dyn Snapshot + '_>> {
        self.conn.execute_batch("BEGIN")?;
        Ok(Box::new(SqliteSnapshot {
            conn: &self.conn,
            sql: self.sql,
        }))
    }
}

/// An open `BEGIN` on a reader connection; `COMMIT`ted on drop.
struct SqliteSnapshot<'r> {
    conn: &'r Connection,
    sql: &'r [TableSql],
}

impl Drop for SqliteSnapshot<'_> {
    fn drop(&mut self) {
        // A read-only transaction cannot fail to end in any way that matters
        // to the benchmark; an error here would surface on the next BEGIN.
        let _ = self.conn.execute_batch("COMMIT");
    }
}

impl Snapshot for SqliteSnapshot<'_> {
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        read_into(self.conn, &self.sql[table.0].get, key, out)
    }

    fn range(
        &mut self,
        table: TableId,
        start: &[u8],
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut stmt = self.conn.prepare_cached(&self.sql[table.0].range)?;
        let mut rows = stmt.query(params![start, i64::try_from(n)?])?;
        let mut seen = 0;
        while let Some(row) = rows.next()? {
            visit(row.get_ref(0)?.as_blob()?, row.get_ref(1)?.as_blob()?);
            seen += 1;
        }
        Ok(seen)
    }
}
