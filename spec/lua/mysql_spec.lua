-- mf.mysql against the mariadbds run_specs.py starts: MF_MYSQL_URL (a test
-- database and user; MF_MYSQL_SOCKET_URL is the same server through its
-- unix socket) and MF_MYSQL_FLAKY_URL, which GET /mysql-kill and
-- /mysql-start on MF_ODD_PORT kill -9 and start again. `moonflow serve`
-- (MF_SERVE_PORT) runs spec/lua/site/mysql_tx.lua against MF_MYSQL_URL.
local mf = require "moonflow"

local url = assert(os.getenv("MF_MYSQL_URL"))
local socket_url = assert(os.getenv("MF_MYSQL_SOCKET_URL"))
local odd = "http://127.0.0.1:" .. assert(os.getenv("MF_ODD_PORT"))
local serve = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

local db = mf.mysql(url)
local redis = mf.redis(assert(os.getenv("MF_REDIS_URL")))

-- The statement's result, asserted to have succeeded.
local function q(sql, ...)
    local res, err = db:query(sql, ...)
    assert(res, err)
    return res
end

local function counts()
    collectgarbage()
    local c = mf.debug.counts()
    return { coroutines = c.coroutines, refs = c.refs, tasks = c.tasks,
             flows = c.flows }
end

-- Polls fn (up to about 5 s) until it returns true-ish; returns that.
local function eventually(fn)
    local v
    for _ = 1, 250 do
        v = fn()
        if v then return v end
        mf.sleep(20)
    end
    return v
end

describe("mf.mysql", function()
    it("gives the same object for the same URL and options", function()
        assert.are.equal(db, mf.mysql(url))
        local a = mf.mysql(url, { pool = 4, timeout = 1000 })
        assert.are.equal(a, mf.mysql(url, { timeout = 1000, pool = 4 }))
        assert.are_not.equal(db, a)
        assert.are.equal("moonflow.mysql", getmetatable(db))
    end)

    it("raises on an unknown option, naming it, and on bad values", function()
        local ok, err = pcall(mf.mysql, url, { frobnicate = 1 })
        assert.is_false(ok)
        assert.matches("unknown option frobnicate", err)
        assert.has_error(function() mf.mysql(url, { pool = "many" }) end)
        assert.has_error(function() mf.mysql(url, { pool = 0 }) end)
        assert.has_error(function() mf.mysql(url, { timeout = -1 }) end)
        assert.has_error(function() mf.mysql(url, { timeout = 1.5 }) end)
        assert.has_error(function() mf.mysql(url, { rows = "columns" }) end)
        assert.has_error(function() mf.mysql(url, "pool=1") end)
        ok, err = pcall(mf.mysql, url, { pipeline = -1 })
        assert.is_false(ok)
        assert.matches("option pipeline", err)
        ok, err = pcall(mf.mysql, url, { pipeline = 5000 })
        assert.is_false(ok)
        assert.matches("option pipeline must be at most 4096", err)
    end)

    it("pipelines prepared statements with pipeline = N, same results", function()
        local p = mf.mysql(url, { pool = 2, pipeline = 8 })
        assert.are_not.equal(db, p)
        assert(p:query("DROP TABLE IF EXISTS lp"))
        assert(p:query("CREATE TABLE lp (k INT PRIMARY KEY, s VARCHAR(8), d DOUBLE)"))
        local n = 24
        local inserts, selects = {}, {}
        for i = 1, n do
            inserts[i] = mf.task.mysql(p, "INSERT INTO lp VALUES (?, ?, ?)",
                i, "s" .. i, i / 4)
            selects[i] = mf.task.mysql(p, "SELECT k, s, d FROM lp WHERE k = ?", i)
        end
        -- All at once: they share the two connections, 8 in flight on each.
        local ins = mf.parallel(inserts):wait()
        local sel = mf.parallel(selects):wait()
        for i = 1, n do
            assert.are.equal("success", ins[i].state)
            assert.are.equal(1, ins[i].affected_rows)
            local plain = assert(db:query("SELECT k, s, d FROM lp WHERE k = ?", i))
            assert.are.same(plain[1], sel[i].rows[1])
        end
        local dup, err = p:query("INSERT INTO lp VALUES (?, ?, ?)", 1, "x", 0)
        assert.is_nil(dup)
        assert.matches("1062", err)
    end)

    it("raises on a malformed URL", function()
        local ok, err = pcall(mf.mysql, "mysql://u:s3cret@127.0.0.1:3306/db?bogus=1")
        assert.is_false(ok)
        assert.matches("malformed", err)
        assert.matches("mysql://u:***@127.0.0.1:3306/db?bogus=1", err, 1, true)
        assert.is_nil(err:find("s3cret", 1, true))
        assert.has_error(function() mf.mysql("http://127.0.0.1/") end)
        assert.has_error(function() mf.mysql(42) end)
    end)

    it("takes every documented option", function()
        local d = mf.mysql(url, { pool = 2, queue = 8, queue_timeout = 2000,
            timeout = 10000, connect_timeout = 3000, idle_timeout = 5000,
            stmt_cache = 4, max_result = 1048576, rows = "array" })
        local res = assert(d:query("SELECT 1 AS one, 'x' AS two"))
        assert.are.same({ 1, "x" }, res[1])
    end)

    it("reaches the server through its unix socket", function()
        local d = mf.mysql(socket_url)
        local res = assert(d:query("SELECT DATABASE() AS db, @@socket AS s"))
        assert.are.equal("mf_test", res[1].db)
        assert.are.equal(assert(os.getenv("MF_MYSQL_SOCKET")), res[1].s)
    end)
end)

describe("db:query", function()
    setup(function()
        q("DROP TABLE IF EXISTS q_t")
        q([[CREATE TABLE q_t (id INT AUTO_INCREMENT PRIMARY KEY,
            name VARCHAR(64) NOT NULL UNIQUE, score DOUBLE)]])
    end)

    it("returns rows by name, with res[i] the same rows", function()
        local res = q("INSERT INTO q_t (name, score) VALUES ('a', 1.5), ('b', 2), ('c', NULL)")
        assert.are.equal(3, res.affected_rows)
        assert.are.equal(1, res.insert_id)
        assert.are.same({}, res.rows)
        assert.are.same({}, res.fields)
        assert.are.equal(0, #res)
        res = q("SELECT id, name, score FROM q_t ORDER BY id")
        assert.are.equal(3, #res)
        assert.are.equal(3, #res.rows)
        assert.are.same({ id = 1, name = "a", score = 1.5 }, res.rows[1])
        assert.are.equal(res.rows[2], res[2])
        assert.are.equal(mf.null, res[3].score)
        local names = {}
        for i, row in ipairs(res) do names[i] = row.name end
        assert.are.same({ "a", "b", "c" }, names)
        assert.is_nil(res.sets)
    end)

    it("returns rows as arrays or both, as the client's rows option says", function()
        local arr = mf.mysql(url, { rows = "array" })
        local both = mf.mysql(url, { rows = "both" })
        local sql = "SELECT name, score FROM q_t WHERE name = 'a'"
        assert.are.same({ "a", 1.5 }, assert(arr:query(sql))[1])
        assert.are.same({ "a", 1.5, name = "a", score = 1.5 },
            assert(both:query(sql))[1])
        assert.are.same({ "a", 1.5 }, assert(arr:query(
            "SELECT name, score FROM q_t WHERE name = ?", "a"))[1])
    end)

    it("describes the fields", function()
        local res = q("SELECT id, name, score, 1 + 1 AS two FROM q_t LIMIT 1")
        assert.are.equal(4, #res.fields)
        assert.are.same({ name = "id", type = 3, table = "q_t" }, res.fields[1])
        assert.are.same({ name = "name", type = 253, table = "q_t" }, res.fields[2])
        assert.are.same({ name = "score", type = 5, table = "q_t" }, res.fields[3])
        assert.are.equal("two", res.fields[4].name)
        assert.are.equal("", res.fields[4].table)
    end)

    it("gives affected_rows, insert_id, warnings and server_status", function()
        local res = q("INSERT INTO q_t (name) VALUES ('d')")
        assert.are.equal(1, res.affected_rows)
        assert.are.equal(4, res.insert_id)
        res = q("UPDATE q_t SET score = 0 WHERE score IS NULL")
        assert.are.equal(2, res.affected_rows)
        res = q("SELECT CAST('12abc' AS INT) AS n")
        assert.are.equal(12, res[1].n)
        assert.are.equal(1, res.warnings)
        assert.are.equal("number", type(res.server_status))
        assert.are.equal(2, bit.band(res.server_status, 2)) -- autocommit
    end)

    it("returns every result set of several statements in res.sets", function()
        local res = q("SELECT 1 AS a; SELECT 2 AS b, 3 AS c; UPDATE q_t SET score = 1 WHERE name = 'zz'")
        assert.are.equal(3, #res.sets)
        assert.are.same({ { a = 1 } }, res.rows)
        assert.are.same(res.rows, res.sets[1].rows)
        assert.are.equal(res[1], res.sets[1][1])
        assert.are.same(res.fields, res.sets[1].fields)
        assert.are.same({ { b = 2, c = 3 } }, res.sets[2].rows)
        assert.are.same({ b = 2, c = 3 }, res.sets[2][1])
        assert.are.equal(0, res.sets[3].affected_rows)
        assert.are.same({}, res.sets[3].rows)
    end)

    it("returns nil and the server's words for a statement error", function()
        local res, err = db:query("INSERT INTO q_t (name) VALUES ('a')")
        assert.is_nil(res)
        assert.are.equal("mysql 1062 23000: Duplicate entry 'a' for key 'name'", err)
        res, err = db:query("SELEKT 1")
        assert.is_nil(res)
        assert.matches("^mysql 1064 42000: You have an error in your SQL syntax", err)
        res, err = db:query("SELECT * FROM no_such_table WHERE id = ?", 1)
        assert.is_nil(res)
        assert.are.equal("mysql 1146 42S02: Table 'mf_test.no_such_table' doesn't exist", err)
        res, err = db:query("SELECT 1; SELEKT 2")
        assert.is_nil(res)
        assert.matches("^mysql 1064 42000", err)
    end)

    it("fails a query over max_result with nil, err", function()
        local small = mf.mysql(url, { max_result = 4096 })
        local res, err = small:query("SELECT REPEAT('x', 100000) AS big")
        assert.is_nil(res)
        assert.matches("^task error", err)
    end)

    it("kills a query past its timeout and says timeout", function()
        local quick = mf.mysql(url, { timeout = 300 })
        local t0 = mf.now()
        local res, err = quick:query("SELECT SLEEP(5)")
        assert.is_nil(res)
        assert.are.equal("timeout: timed out", err)
        assert.is_true(mf.now() - t0 < 4000)
        assert.are.equal(1, assert(quick:query("SELECT 1 AS one"))[1].one)
        -- nothing is left running on the server
        assert.is_truthy(eventually(function()
            return q("SELECT COUNT(*) AS n FROM information_schema.processlist "
                .. "WHERE info LIKE 'SELECT SLEEP(5)%'")[1].n == 0
        end))
    end)
end)

describe("values", function()
    setup(function()
        q("DROP TABLE IF EXISTS v_t")
        q([[CREATE TABLE v_t (id INT PRIMARY KEY, i BIGINT, u BIGINT UNSIGNED,
            d DECIMAL(10,3), f FLOAT, g DOUBLE, dt DATETIME(6), dd DATE,
            tt TIME, ts TIMESTAMP NULL, j JSON, b BLOB, s VARCHAR(32),
            bt BIT(8), y YEAR, n INT NULL) DEFAULT CHARSET=utf8mb4]])
        q([[INSERT INTO v_t VALUES (1, -9223372036854775808,
            18446744073709551615, 12.340, 0.5, 2.25,
            '2024-02-29 13:14:15.123456', '2024-02-29', '-01:02:03',
            '2024-01-01 00:00:00', '{"a": [1, 2]}', X'00FF0041', 'héllo 😀',
            b'00000101', 2024, NULL)]])
        q([[INSERT INTO v_t (id, i, u) VALUES (2, 9007199254740992, 9007199254740993),
            (3, -9007199254740992, 0)]])
    end)

    local function check_row1(r)
        assert.are.equal("-9223372036854775808", r.i)
        assert.are.equal("18446744073709551615", r.u)
        assert.are.equal("12.340", r.d)
        assert.are.equal(0.5, r.f)
        assert.are.equal(2.25, r.g)
        assert.are.equal("2024-02-29 13:14:15.123456", r.dt)
        assert.are.equal("2024-02-29", r.dd)
        assert.are.equal("-01:02:03", r.tt)
        assert.are.equal("2024-01-01 00:00:00", r.ts)
        assert.are.same({ a = { 1, 2 } }, mf.json.decode(r.j))
        assert.are.equal("\0\255\0A", r.b)
        assert.are.equal(4, #r.b)
        assert.are.equal("héllo 😀", r.s)
        assert.are.equal("\5", r.bt)
        assert.are.equal(2024, r.y)
        assert.are.equal(mf.null, r.n)
    end

    it("converts every type through the text protocol", function()
        check_row1(q("SELECT * FROM v_t WHERE id = 1")[1])
    end)

    it("converts every type the same through a prepared statement", function()
        check_row1(q("SELECT * FROM v_t WHERE id = ?", 1)[1])
    end)

    it("keeps integers within 2^53 as numbers and beyond as strings", function()
        for _, args in ipairs { {}, { 0 } } do
            local sql = "SELECT id, i, u FROM v_t WHERE id IN (2, 3)" ..
                (#args > 0 and " AND 0 = ?" or "") .. " ORDER BY id"
            local res = q(sql, unpack(args))
            assert.are.equal(9007199254740992, res[1].i)
            assert.are.equal("9007199254740993", res[1].u)
            assert.are.equal(-9007199254740992, res[2].i)
            assert.are.equal(0, res[2].u)
        end
    end)
end)

describe("parameters", function()
    it("sends nil and mf.null as NULL, booleans as 1/0", function()
        local r = q("SELECT ? IS NULL AS a, ? IS NULL AS b, ? AS t, ? AS f",
            nil, mf.null, true, false)[1]
        assert.are.same({ a = 1, b = 1, t = 1, f = 0 }, r)
    end)

    it("sends integral numbers as integers and others as doubles", function()
        local r = q("SELECT ? AS i, ? AS big, ? AS neg, ? AS x, ? + 0 = 0.1 AS exact",
            42, 2 ^ 60, -2 ^ 63, 1.5, 0.1)[1]
        assert.are.equal(42, r.i)
        assert.are.equal("1152921504606846976", r.big)
        assert.are.equal("-9223372036854775808", r.neg)
        assert.are.equal(1.5, r.x)
        assert.are.equal(1, r.exact)
        local t = q("SELECT CAST(? AS CHAR) AS c", 2 ^ 64)[1]
        assert.are.equal(1.8446744073709552e19, tonumber(t.c))
    end)

    it("sends strings as their bytes", function()
        local s = "a\0b'c\"d\\e 😀"
        local r = q("SELECT ? AS s, LENGTH(?) AS n", s, s)[1]
        assert.are.equal(s, r.s)
        assert.are.equal(#s, r.n)
        assert.are.equal("", q("SELECT ? AS e", "")[1].e)
    end)

    it("keeps injection attempts as data", function()
        q("DROP TABLE IF EXISTS inj_t")
        q("CREATE TABLE inj_t (v VARCHAR(100))")
        local evil = "x'); DROP TABLE inj_t; -- "
        q("INSERT INTO inj_t VALUES (?)", evil)
        q("INSERT INTO inj_t VALUES (" .. db:quote(evil) .. ")")
        local res = q("SELECT v FROM inj_t")
        assert.are.equal(2, #res)
        assert.are.equal(evil, res[1].v)
        assert.are.equal(evil, res[2].v)
        assert.are.equal(0, q("SELECT COUNT(*) AS n FROM inj_t WHERE v = ?", "' OR '1'='1")[1].n)
    end)

    it("raises on a parameter of another type", function()
        assert.has_error(function() db:query("SELECT ?", {}) end)
        assert.has_error(function() db:query("SELECT ?", print) end)
        assert.has_error(function() db:query("SELECT ?", coroutine.create(print)) end)
        local ok, err = pcall(db.query, db, "SELECT ?, ?", 1, {})
        assert.is_false(ok)
        assert.matches("parameter 2 is a table", err)
    end)

    it("returns nil, err when the count does not match the markers", function()
        local res, err = db:query("SELECT ? AS a, ? AS b", 1)
        assert.is_nil(res)
        assert.is_string(err)
        res, err = db:query("SELECT 1 AS a", 1)
        assert.is_nil(res)
        assert.is_string(err)
        assert.are.equal(1, q("SELECT ? AS a", 1)[1].a) -- and the pool goes on
    end)

    it("reuses prepared statements across calls", function()
        for i = 1, 50 do
            assert.are.equal(i * 2, q("SELECT ? * 2 AS v", i)[1].v)
        end
    end)
end)

describe("db:quote", function()
    it("quotes a string as an SQL literal", function()
        assert.are.equal("'it\\'s'", db:quote("it's"))
        assert.are.equal("''", db:quote(""))
        for _, s in ipairs { "it's", "back\\slash", "nul\0byte", "😀\"\n\r\26", ("x"):rep(2000) } do
            assert.are.equal(s, q("SELECT " .. db:quote(s) .. " AS v")[1].v)
        end
    end)

    it("raises on anything but a string", function()
        assert.has_error(function() db:quote({}) end)
        assert.has_error(function() db:quote() end)
    end)
end)

describe("db:rows", function()
    it("streams 100,000 rows and counts them right", function()
        local n, sum = 0, 0
        for row in db:rows("SELECT seq FROM seq_1_to_100000") do
            n = n + 1
            sum = sum + row.seq
        end
        assert.are.equal(100000, n)
        assert.are.equal(100000 * 100001 / 2, sum)
    end)

    it("streams a prepared statement's rows, as arrays with rows = 'array'", function()
        local arr = mf.mysql(url, { rows = "array" })
        local seen = {}
        for row in arr:rows("SELECT seq, seq * ? FROM seq_1_to_600", 3) do
            seen[#seen + 1] = row[2]
        end
        assert.are.equal(600, #seen)
        assert.are.equal(1800, seen[600])
    end)

    it("streams nothing for an empty result", function()
        local n = 0
        for _ in db:rows("SELECT seq FROM seq_1_to_10 WHERE seq > 10") do n = n + 1 end
        assert.are.equal(0, n)
    end)

    it("lets the loop body make other calls", function()
        local n = 0
        for row in db:rows("SELECT seq FROM seq_1_to_300") do
            if row.seq % 100 == 0 then
                assert.are.equal(row.seq, q("SELECT ? AS v", row.seq)[1].v)
                mf.sleep(1)
                assert.are.equal("PONG", redis:call("PING"))
            end
            n = n + 1
        end
        assert.are.equal(300, n)
    end)

    it("can be broken out of early, and querying again works", function()
        local before = counts()
        for _ = 1, 20 do
            local n = 0
            for _ in db:rows("SELECT seq FROM seq_1_to_100000") do
                n = n + 1
                if n == 300 then break end
            end
            assert.are.equal(300, n)
            assert.are.equal(1, q("SELECT 1 AS one")[1].one)
        end
        collectgarbage()
        collectgarbage()
        -- the abandoned streams' connections are closed, not pooled
        assert.is_truthy(eventually(function()
            collectgarbage()
            return db:open() <= 16
        end))
        assert.are.same(before, counts())
    end)

    it("raises the server's words for an error at the start", function()
        local ok, err = pcall(function()
            for _ in db:rows("SELECT * FROM no_such_table") do end
        end)
        assert.is_false(ok)
        assert.are.equal("mysql 1146 42S02: Table 'mf_test.no_such_table' doesn't exist", err)
    end)

    it("raises the server's words for an error in the middle", function()
        local n = 0
        local ok, err = pcall(function()
            for _ in db:rows([[SELECT seq, IF(seq = 1000,
                    (SELECT 1 UNION SELECT 2), seq) AS v FROM seq_1_to_2000]]) do
                n = n + 1
            end
        end)
        assert.is_false(ok)
        assert.are.equal("mysql 1242 21000: Subquery returns more than 1 row", err)
        assert.is_true(n < 1000)
        assert.are.equal(1, q("SELECT 1 AS one")[1].one)
    end)

    it("raises on misuse", function()
        assert.has_error(function() db:rows() end)
        assert.has_error(function() db:rows(42) end)
        assert.has_error(function() db:rows("SELECT ?", {}) end)
        assert.has_error(function() mf.mysql(url).rows({}, "SELECT 1") end)
    end)
end)

describe("db:transaction", function()
    setup(function()
        q("DROP TABLE IF EXISTS tx_t")
        q("CREATE TABLE tx_t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
    end)

    local function has(id)
        return q("SELECT COUNT(*) AS n FROM tx_t WHERE id = ?", id)[1].n == 1
    end

    it("commits when fn returns, and returns true and fn's returns", function()
        local ok, a, b = db:transaction(function(tx, x, y)
            assert(tx:query("INSERT INTO tx_t VALUES (1, ?)", x))
            assert(tx:query("INSERT INTO tx_t VALUES (2, 'two')"))
            local res = assert(tx:query("SELECT COUNT(*) AS n FROM tx_t"))
            return res[1].n, y
        end, "one", "extra")
        assert.is_true(ok)
        assert.are.equal(2, a)
        assert.are.equal("extra", b)
        assert.is_true(has(1))
        assert.is_true(has(2))
    end)

    it("rolls back when fn raises, and returns nil and the error", function()
        local ok, err = db:transaction(function(tx)
            assert(tx:query("INSERT INTO tx_t VALUES (10, 'x')"))
            error("changed my mind", 0)
        end)
        assert.is_nil(ok)
        assert.are.equal("changed my mind", err)
        assert.is_false(has(10))
    end)

    it("rolls back on a query error fn re-raised", function()
        local ok, err = db:transaction(function(tx)
            assert(tx:query("INSERT INTO tx_t VALUES (11, 'x')"))
            local res, err = tx:query("INSERT INTO tx_t VALUES (11, 'duplicate')")
            if not res then error(err, 0) end
            return true
        end)
        assert.is_nil(ok)
        assert.are.equal("mysql 1062 23000: Duplicate entry '11' for key 'PRIMARY'", err)
        assert.is_false(has(11))
    end)

    it("rolls back when fn returns nil, err or false", function()
        local ok, err = db:transaction(function(tx)
            assert(tx:query("INSERT INTO tx_t VALUES (12, 'x')"))
            return nil, "not enough stock"
        end)
        assert.is_nil(ok)
        assert.are.equal("not enough stock", err)
        ok, err = db:transaction(function(tx)
            assert(tx:query("INSERT INTO tx_t VALUES (13, 'x')"))
            return false
        end)
        assert.is_nil(ok)
        assert.are.equal("rolled back", err)
        assert.is_false(has(12))
        assert.is_false(has(13))
    end)

    it("ends with nil, err when a query inside times out (killed, rolled back)", function()
        local quick = mf.mysql(url, { timeout = 400 })
        local t0 = mf.now()
        local ok, err = quick:transaction(function(tx)
            assert(tx:query("INSERT INTO tx_t VALUES (14, 'x')"))
            local res, qerr = tx:query("SELECT SLEEP(5)")
            assert.is_nil(res)
            assert.are.equal("timeout: timed out", qerr)
            return true -- the connection broke: COMMIT is refused
        end)
        assert.is_nil(ok)
        assert.are.equal("timeout: timed out", err)
        assert.is_true(mf.now() - t0 < 4000)
        assert.is_false(has(14))
    end)

    it("sees its own writes and reads other connections' committed ones", function()
        local ok = db:transaction(function(tx)
            assert(tx:query("INSERT INTO tx_t VALUES (20, 'mine')"))
            assert.are.equal(1, assert(tx:query("SELECT COUNT(*) AS n FROM tx_t WHERE id = 20"))[1].n)
            assert.is_false(has(20)) -- another connection: not yet
            local n = 0
            for row in tx:rows("SELECT id FROM tx_t WHERE id = 20") do n = n + row.id end
            assert.are.equal(20, n)
            assert.are.equal("'a\\'b'", tx:quote("a'b"))
            return true
        end)
        assert.is_true(ok)
        assert.is_true(has(20))
    end)

    it("lets fn break out of tx:rows and query again on the same connection", function()
        local ok, n = db:transaction(function(tx)
            local n = 0
            for _ in tx:rows("SELECT seq FROM seq_1_to_50000") do
                n = n + 1
                if n == 10 then break end
            end
            assert(tx:query("INSERT INTO tx_t VALUES (21, 'after break')"))
            return n
        end)
        assert.is_true(ok)
        assert.are.equal(10, n)
        assert.is_true(has(21))
    end)

    it("discards a tx:rows stream when fn queries its connection inside the loop", function()
        local ok, err = db:transaction(function(tx)
            for row in tx:rows("SELECT seq FROM seq_1_to_5000") do
                assert(tx:query("INSERT INTO tx_t VALUES (?, 'in loop')", 100 + row.seq))
            end
            return true
        end)
        assert.is_nil(ok)
        assert.matches("stream was discarded", err)
        assert.is_false(has(101))
    end)

    it("makes tx unusable once fn returned", function()
        local kept
        assert.is_true(db:transaction(function(tx) kept = tx; return true end))
        local ok, err = pcall(kept.query, kept, "SELECT 1")
        assert.is_false(ok)
        assert.matches("transaction is over", err)
        assert.has_error(function() kept:quote("x") end)
        assert.has_error(function() kept:rows("SELECT 1") end)
    end)

    it("raises when fn is not a function", function()
        assert.has_error(function() db:transaction() end)
        assert.has_error(function() db:transaction("COMMIT") end)
        local ok, err = pcall(db.transaction, db, 42)
        assert.is_false(ok)
        assert.matches("fn must be a function", err)
    end)

    it("leaks nothing", function()
        local before = counts()
        for i = 1, 20 do
            db:transaction(function(tx)
                assert(tx:query("SELECT 1"))
                if i % 2 == 0 then error("x") end
                return i % 3 ~= 0
            end)
        end
        assert.are.same(before, counts())
    end)
end)

describe("db:session", function()
    it("keeps session state inside and none of it outside", function()
        local v, w = db:session(function(s, x)
            assert(s:query("SET @v = ?", x))
            assert(s:query("CREATE TEMPORARY TABLE sess_tmp (a INT)"))
            assert(s:query("INSERT INTO sess_tmp VALUES (1), (2)"))
            local n = 0
            for row in s:rows("SELECT a FROM sess_tmp") do n = n + row.a end
            return assert(s:query("SELECT @v AS v"))[1].v, n
        end, "kept")
        assert.are.equal("kept", v)
        assert.are.equal(3, w)
        local small = mf.mysql(url, { pool = 1 })
        assert(small:session(function(s) return s:query("SET @w = 5") end))
        assert.are.equal(mf.null, assert(small:query("SELECT @w AS w"))[1].w)
        local res, err = small:query("SELECT * FROM sess_tmp")
        assert.is_nil(res)
        assert.matches("^mysql 1146", err)
    end)

    it("re-raises fn's error once the connection went back", function()
        local small = mf.mysql(url, { pool = 1, queue_timeout = 2000 })
        local obj = { why = "boom" }
        local ok, err = pcall(small.session, small, function(s)
            assert(s:query("SET @x = 1"))
            error(obj)
        end)
        assert.is_false(ok)
        assert.are.equal(obj, err)
        ok, err = pcall(small.session, small, function() error("plain", 0) end)
        assert.is_false(ok)
        assert.are.equal("plain", err)
        assert.are.equal(1, assert(small:query("SELECT 1 AS one"))[1].one)
    end)

    it("raises when fn is not a function", function()
        assert.has_error(function() db:session() end)
        assert.has_error(function() db:session({}) end)
    end)
end)

describe("mf.task.mysql", function()
    it("runs in a series and a parallel, results like db:query's", function()
        local r = mf.series {
            mf.task.mysql(db, "SELECT ? AS a", 1),
            mf.parallel {
                mf.task.mysql(db, "SELECT 2 AS b; SELECT 3 AS c"),
                mf.task.mysql { db = db, sql = "SELECT ? AS x, ? AS y",
                    args = { "p", 7 }, rows = "array" },
            },
        }:wait()
        assert.are.equal("success", r[1].state)
        assert.are.equal(1, r[1].rows[1].a)
        assert.are.equal(1, r[1][1].a)
        assert.are.equal(2, r[2][1].rows[1].b)
        assert.are.equal(3, r[2][1].sets[2][1].c)
        assert.are.same({ "p", 7 }, r[2][2].rows[1])
        assert.are.equal("x", r[2][2].fields[1].name)
    end)

    it("waits alone and sends nil parameters", function()
        local r = mf.task.mysql(db, "SELECT ? IS NULL AS n, ? AS v", nil, 5):wait()
        assert.are.equal("success", r.state)
        assert.are.same({ n = 1, v = 5 }, r[1])
        r = mf.task.mysql { db = db, sql = "SELECT ? AS v", args = { n = 1 } }:wait()
        assert.are.equal(mf.null, r[1].v)
    end)

    it("fails with the server's words in error", function()
        local r = mf.task.mysql(db, "SELECT * FROM no_such_table"):wait()
        assert.are.equal("task error", r.state)
        assert.are.equal("task error: mysql 1146 42S02: Table 'mf_test.no_such_table' doesn't exist", r.error)
        assert.is_nil(r.rows)
    end)

    it("takes task options in a trailing table", function()
        local r = mf.task.mysql(db, "SELECT SLEEP(3)", { timeout = 200 }):wait()
        assert.are.equal("timeout", r.state)
    end)

    it("raises on a malformed description", function()
        assert.has_error(function() mf.task.mysql("db", "SELECT 1") end)
        assert.has_error(function() mf.task.mysql(db, 42) end)
        assert.has_error(function() mf.task.mysql { db = db }:wait() end)
        assert.has_error(function() mf.task.mysql { db = db, sql = "SELECT ?", args = { {} } }:wait() end)
        assert.has_error(function() mf.task.mysql { db = db, sql = "SELECT 1", rows = "rows" }:wait() end)
        assert.has_error(function() mf.series { mf.task.mysql { db = 1, sql = "x" } }:wait() end)
    end)
end)

describe("misuse", function()
    it("works inside a plain coroutine too (its resume passes waits up)", function()
        for _, call in ipairs {
            function() return db:query("SELECT 1") end,
            function() for _ in db:rows("SELECT 1") do end return true end,
            function() return db:transaction(function() return true end) end,
            function() return db:session(function() return true end) end,
        } do
            local ok, res = coroutine.resume(coroutine.create(call))
            assert.is_true(ok, res)
            assert.truthy(res)
        end
    end)

    it("raises on bad argument types", function()
        assert.has_error(function() db:query() end)
        assert.has_error(function() db:query(42) end)
        assert.has_error(function() db.query({}, "SELECT 1") end)
        assert.has_error(function() db.query(redis, "SELECT 1") end)
        assert.has_error(function() db:query("") end)
    end)
end)

describe("a mysql server that goes away", function()
    local flaky = mf.mysql(assert(os.getenv("MF_MYSQL_FLAKY_URL")))

    it("fails the queries while down and serves again once back", function()
        assert(flaky:query("SELECT 1"))
        assert(mf.http.get(odd .. "/mysql-kill"))
        local res, err = flaky:query("SELECT 1")
        assert.is_nil(res)
        assert.is_string(err)
        local ok, terr = flaky:transaction(function(tx) return tx:query("SELECT 1") end)
        assert.is_nil(ok)
        assert.is_string(terr)
        assert(mf.http.get(odd .. "/mysql-start", { timeout = 60000 }))
        local back = eventually(function() return flaky:query("SELECT 7 AS v") end)
        assert.are.equal(7, back[1].v)
    end)
end)

describe("mysql under moonflow serve", function()
    local function get(path, opts)
        return mf.http.get(serve .. path, opts)
    end

    setup(function()
        q("DROP TABLE IF EXISTS serve_t")
        q("CREATE TABLE serve_t (id INT PRIMARY KEY) ENGINE=InnoDB")
    end)

    it("commits from a handler", function()
        local res = assert(get("/mysql_tx?op=insert&id=1"))
        assert.are.equal(200, res.status)
        assert.are.equal("1", assert(get("/mysql_tx?op=count&id=1")).body)
    end)

    it("answers 500 for a Lua error inside a transaction, rolled back, the connection back", function()
        local res = assert(get("/mysql_tx?op=raise&id=2"))
        assert.are.equal(500, res.status)
        -- the handler's client has one connection: it came back
        res = assert(get("/mysql_tx?op=count&id=2"))
        assert.are.equal(200, res.status)
        assert.are.equal("0", res.body)
        assert.are.equal(0, q("SELECT COUNT(*) AS n FROM serve_t WHERE id = 2")[1].n)
    end)

    local function serve_counts()
        return mf.json.decode(assert(get("/counts")).body)
    end

    it("gives the connection back when a client leaves mid-transaction", function()
        assert(get("/mysql_tx?op=count&id=3"))
        local before = serve_counts()
        for _ = 1, 3 do
            local res, err = get("/mysql_tx?op=hang&id=3", { timeout = 300 })
            assert.is_nil(res)
            assert.is_string(err)
            res = assert(get("/mysql_tx?op=count&id=3", { timeout = 10000 }))
            assert.are.equal(200, res.status)
            assert.are.equal("0", res.body)
        end
        -- both coroutines (the handler's and its transaction's) are gone
        local after = serve_counts()
        assert.are.equal(before.coroutines, after.coroutines)
        assert.are.equal(before.refs, after.refs)
        assert.are.equal(before.tasks, after.tasks)
        -- and nothing is left running on the server
        assert.is_truthy(eventually(function()
            return q("SELECT COUNT(*) AS n FROM information_schema.processlist "
                .. "WHERE info LIKE 'SELECT SLEEP(10)%'")[1].n == 0
        end))
    end)

    it("gives the connection back when the watchdog stops a runaway fn", function()
        local res = assert(get("/mysql_tx?op=spin&id=4", { timeout = 20000 }))
        assert.are.equal(500, res.status)
        res = assert(get("/mysql_tx?op=count&id=4", { timeout = 10000 }))
        assert.are.equal(200, res.status)
        assert.are.equal("0", res.body)
    end)
end)
