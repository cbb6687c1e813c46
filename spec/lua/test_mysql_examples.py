"""examples/mysql_cli and examples/mysql_site against one mariadbd of their
own (harness.MariaDB: a fresh datadir on a free loopback port):

mysql_cli.lua under `moonflow run` must print what `mariadb -B` prints for
the same statements (a table of every type with its limits, NULL, escapes,
an empty set, a procedure with three result sets, an error at the end), on
stdin and with -e, with the same exit status and ERROR line.

mysql_site under `moonflow serve`: notes written with POST and read with
GET (statuses, JSON, the rows on the server), 400/404/405 for bad input,
an injection attempt stored as data, transfers that commit, and refused
ones that leave both balances as they were; with mariadbd killed, 500 and
a log line; after it restarts, answers again.

  MF_MOONFLOW=build/moonflow python3 spec/lua/test_mysql_examples.py
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

MOONFLOW = os.path.abspath(os.environ["MF_MOONFLOW"])
CLI = os.path.join(ROOT, "examples", "mysql_cli", "mysql_cli.lua")
SITE = os.path.join(ROOT, "examples", "mysql_site")
check = harness.Checks()
failures = check.failures


# ---- mysql_cli ---------------------------------------------------------------

TYPES = r"""
CREATE TABLE types (
  id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT,
  mi MEDIUMINT, i INT, bi BIGINT, bu BIGINT UNSIGNED, dec65 DECIMAL(65,30),
  f FLOAT, d DOUBLE, dt DATE, dtm DATETIME(6), tm TIME, y YEAR,
  s VARCHAR(64), b BLOB, j JSON, bits BIT(8), e ENUM('a','b')
) DEFAULT CHARSET = utf8mb4;
INSERT INTO types VALUES
  (1, -128, 255, -32768, -8388608, -2147483648, -9223372036854775808,
   18446744073709551615, -99999999999999999999999999999999999.999999999999999999999999999999,
   -3.40282e38, -1.7976931348623157e308, '1000-01-01', '1000-01-01 00:00:00.000000',
   '-838:59:59', 1901, 'tab\there', 'nul\0byte', '{"a": [1, 2.5, null]}', b'00001001', 'a'),
  (2, 127, 0, 32767, 8388607, 2147483647, 9223372036854775807, 0,
   0.000000000000000000000000000001, 0.333333, 0.1, '9999-12-31',
   '9999-12-31 23:59:59.999999', '838:59:59', 2155, 'line\nbreak \\ back',
   '', '[]', b'11111111', 'b'),
  (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, 'café 😀', NULL, NULL, NULL, NULL),
  (4, 0, 1, 0, 0, 0, 4503599627370497, 9007199254740993, 1.5, 1e-5, 1e15, '2024-02-29',
   '2024-02-29 12:34:56.5', '00:00:00', 2024, '', 'x', 'null', b'0', NULL);
SELECT * FROM types ORDER BY id;
SELECT id, s FROM types WHERE id > 100;
SELECT NULL, NULL AS n2, 0.1e0 + 0.2e0 AS d, 1e300 AS big, 1.25e-16 AS small,
  123456789012345e0 AS fixed, 'a' 'b' AS joined, -- a comment; here
  "semi;colon" AS `odd;name`, 1 /* ; */ AS c;
UPDATE types SET ti = 0 WHERE id = 4;
# comment line; with a semicolon
CALL three_sets();
SELECT COUNT(*) AS n FROM types;
SELECT nosuch
  FROM types;
SELECT 'never reached';
"""

PROCEDURE = """DELIMITER //
CREATE PROCEDURE three_sets()
BEGIN
  SELECT 1 AS first;
  SELECT 'two' AS second, NULL AS nothing;
  SELECT id, bu FROM types ORDER BY id DESC;
END//
"""

E_SQL = "SELECT 1 AS one, 'a\\tb' AS t; SELECT 2 AS two; SELECT 3 FROM nosuch"


def mariadb_b(db, stdin=None, args=()):
    argv = ["mariadb", "--no-defaults", "-B", "--default-character-set=utf8mb4",
            "-h127.0.0.1", "-P%d" % db.port, "-u" + db.USER,
            "-p" + db.PASSWORD, db.DB] + list(args)
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60)


def our_cli(db, stdin=None, args=()):
    return subprocess.run([MOONFLOW, "run", CLI, "-u", db.url()] + list(args),
                          input=stdin, capture_output=True, timeout=60)


def error_lines(stderr):
    """The ERROR lines (moonflow prints a raised error after "moonflow: ")."""
    lines = (l.replace("moonflow: ", "", 1)
             for l in stderr.decode(errors="replace").splitlines())
    return [l for l in lines if l.startswith("ERROR")]


def compare_cli(name, theirs, ours):
    check("mysql_cli (%s): the same stdout as mariadb -B" % name,
          ours.stdout == theirs.stdout,
          "mariadb -B:\n%r\nmysql_cli:\n%r\nstderr: %s" % (
              theirs.stdout, ours.stdout, ours.stderr.decode(errors="replace")))
    check("mysql_cli (%s): the same exit status (%d)" % (name, theirs.returncode),
          ours.returncode == theirs.returncode, "ours: %d" % ours.returncode)
    check("mysql_cli (%s): the same ERROR line" % name,
          error_lines(ours.stderr) == error_lines(theirs.stderr) != [],
          "mariadb: %r\nours: %r" % (theirs.stderr, ours.stderr))


def test_cli(db):
    setup, queries = TYPES.split("SELECT * FROM types", 1)
    # Through the utf8mb4 client: harness.sql's would mangle the emoji.
    for sql in (setup, PROCEDURE):
        done = mariadb_b(db, sql.encode())
        if done.returncode != 0:
            raise RuntimeError("setup: %s" % done.stderr.decode(errors="replace"))
    queries = ("SELECT * FROM types" + queries).encode()
    theirs = mariadb_b(db, queries)
    check("mariadb -B printed every set before the error",
          theirs.stdout.count(b"\n") > 15 and b"never reached" not in theirs.stdout,
          theirs.stdout)
    compare_cli("stdin", theirs, our_cli(db, queries))
    compare_cli("-e", mariadb_b(db, args=["-e", E_SQL]),
                our_cli(db, args=["-e", E_SQL]))
    ok = our_cli(db, args=["-e", "SELECT 42 AS answer"])
    check("mysql_cli -e: one set and exit 0",
          ok.returncode == 0 and ok.stdout == b"answer\n42\n", ok)


# ---- mysql_site ----------------------------------------------------------------


def http(port, method, path, body=None):
    data = b"" if body is None else body.encode()
    raw = ("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
           % (method, path, len(data))).encode() + data
    resp = harness.request(port, raw, timeout=15)
    try:
        resp.json = json.loads(resp.body)
    except ValueError:
        resp.json = None
    return resp


def balances(db):
    out = db.sql("SELECT name, balance FROM accounts ORDER BY name", db=db.DB)
    return {n: int(b) for n, b in (l.split("\t") for l in out.splitlines())}


def test_notes(db, port):
    note = {"title": "hello", "body": "caf\u00e9 \U0001F600\n\"quoted\""}
    made = http(port, "POST", "/notes", json.dumps(note))
    check("POST /notes: 201 and the new id", made.status == 201 and
          isinstance(made.json, dict) and made.json.get("id", 0) >= 1, made.body)
    nid = made.json["id"] if made.json else 0
    row = db.sql("SELECT title, HEX(body) FROM notes WHERE id = %d" % nid, db=db.DB)
    check("POST /notes: the row is on the server, byte for byte",
          row == "hello\t%s\n" % note["body"].encode().hex().upper(), row)
    got = http(port, "GET", "/notes?id=%d" % nid)
    check("GET /notes?id=N: 200 and the row as JSON",
          got.status == 200 and got.json and got.json["id"] == nid
          and got.json["title"] == "hello" and got.json["body"] == note["body"]
          and len(got.json["created"]) == 26, got.body)
    check("GET /notes: application/json",
          "json" in (got.header("content-type") or ""), got.raw_head)
    evil = "x'); DROP TABLE notes; -- \\' \" ;"
    made2 = http(port, "POST", "/notes", json.dumps({"title": evil, "body": ""}))
    eid = made2.json["id"] if made2.json else 0
    back = http(port, "GET", "/notes?id=%d" % eid).json or {}
    check("POST /notes: an injection attempt lands as data",
          made2.status == 201 and back.get("title") == evil
          and db.sql("SELECT COUNT(*) FROM notes", db=db.DB) == "2\n",
          "%r %r" % (made2.body, back))
    for path, status in (("/notes?id=999999", 404), ("/notes?id=abc", 400),
                         ("/notes?id=0", 400), ("/notes", 400),
                         ("/notes?id=1.5", 400), ("/_db", 404)):
        r = http(port, "GET", path)
        check("GET %s: %d" % (path, status), r.status == status,
              "%d %r" % (r.status, r.body))
    for body in ("not json", "{}", '{"title": ""}', '{"title": 1, "body": ""}', "[]"):
        r = http(port, "POST", "/notes", body)
        check("POST /notes %s: 400" % body, r.status == 400 and r.json
              and "error" in r.json, "%d %r" % (r.status, r.body))
    check("DELETE /notes: 405", http(port, "DELETE", "/notes").status == 405)
    check("nothing else was written",
          db.sql("SELECT COUNT(*) FROM notes", db=db.DB) == "2\n")


def test_transfer(db, port):
    db.sql("INSERT INTO accounts VALUES ('alice', 100), ('bob', 0)", db=db.DB)
    ok = http(port, "POST", "/transfer",
              json.dumps({"from": "alice", "to": "bob", "amount": 30}))
    check("POST /transfer: 200 and the balances after",
          ok.status == 200 and ok.json == {"from": {"name": "alice", "balance": 70},
                                           "to": {"name": "bob", "balance": 30}},
          ok.body)
    check("POST /transfer: committed on the server",
          balances(db) == {"alice": 70, "bob": 30}, balances(db))
    for body, status in (({"from": "alice", "to": "bob", "amount": 71}, 409),
                         ({"from": "alice", "to": "carol", "amount": 1}, 404),
                         ({"from": "carol", "to": "bob", "amount": 1}, 404),
                         ({"from": "alice", "to": "bob", "amount": -5}, 400),
                         ({"from": "alice", "to": "alice", "amount": 5}, 400),
                         ({"from": "alice", "amount": 5}, 400)):
        r = http(port, "POST", "/transfer", json.dumps(body))
        check("POST /transfer %s: %d" % (json.dumps(body), status),
              r.status == status, "%d %r" % (r.status, r.body))
    check("refused transfers changed nothing",
          balances(db) == {"alice": 70, "bob": 30}, balances(db))
    check("GET /transfer: 405", http(port, "GET", "/transfer").status == 405)


def test_dead_database(db, port):
    db.kill()
    dead = http(port, "GET", "/notes?id=1")
    check("with mariadbd down: 500 and a JSON error",
          dead.status == 500 and dead.json == {"error": "database unavailable"},
          "%d %r" % (dead.status, dead.body))
    db.start()
    deadline = time.time() + 20
    back = dead
    while back.status != 200 and time.time() < deadline:
        time.sleep(0.2)
        back = http(port, "GET", "/notes?id=1")
    check("once mariadbd is back: 200 again", back.status == 200,
          "%d %r" % (back.status, back.body))


def test_site(db):
    db.sql(open(os.path.join(SITE, "schema.sql")).read(), db=db.DB)
    port = harness.free_port()
    env = dict(os.environ, MYSQL_URL=db.url())
    serve = harness.Server([MOONFLOW, "serve", SITE, "--workers", "1",
                            "--listen", "127.0.0.1:%d" % port], port, env=env)
    stopped = False
    try:
        test_notes(db, port)
        test_transfer(db, port)
        test_dead_database(db, port)
        _, _, err = serve.stop(timeout=10)
        stopped = True
        check("the failure is on the error log",
              b"mysql_site: GET /notes: " in err, err[-2000:])
    finally:
        if not stopped:
            serve.stop()


def main():
    db = harness.MariaDB()
    try:
        test_cli(db)
        test_site(db)
    finally:
        db.close()
    if failures:
        print("%d failed: %s" % (len(failures), ", ".join(failures)))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
