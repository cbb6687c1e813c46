-- Misuse names the function: every public function of the mf table (walked
-- at run time, so a new one cannot be missed) and every method of the
-- client objects, called with arguments of the wrong type, raises a message
-- that names it as the script wrote it ("mf.sleep(ms): a number expected,
-- got string", "sock:connect(host, port [, opts]): port: ..."), never
-- lauxlib's "bad argument #1 to '?'".
local mf = require "moonflow"

-- Functions of mf that take anything, or nothing, and so raise on no
-- argument type: they are called all the same, and must not raise badly.
local takes_anything = {
    ["mf.now"] = true, ["mf.debug.counts"] = true, ["mf.metrics.text"] = true,
    ["mf.json.encode"] = true, ["mf.socket.tcp"] = true,
    ["mf.socket.udp"] = true, ["mf.queue"] = true, ["mf.semaphore"] = true,
}

-- Calls that park for good on some of these arguments (a wait on
-- nothing): their argument checks are covered by their own specs.
local skipped = { ["mf.wait_any"] = true }

-- The arguments of the wrong type tried on every function.
local wrong = { {}, { true }, { true, true }, { {}, true, true } }

local function functions_of(t, prefix, seen, out)
    local keys = {}
    for k in pairs(t) do
        if type(k) == "string" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
        local v, name = t[k], prefix .. "." .. k
        if type(v) == "function" then
            out[#out + 1] = { name = name, fn = v }
        elseif type(v) == "table" and not seen[v] then
            seen[v] = true
            functions_of(v, name, seen, out)
        end
    end
    return out
end

-- The messages fn raised on the wrong arguments (prefix: args before them;
-- sets: the argument lists, wrong's by default).
local function raised(fn, prefix, sets)
    local msgs = {}
    for _, args in ipairs(sets or wrong) do
        local call = {}
        for i, v in ipairs(prefix or {}) do call[i] = v end
        for _, v in ipairs(args) do call[#call + 1] = v end
        local ok, err = pcall(fn, unpack(call, 1, #(prefix or {}) + #args))
        if not ok then msgs[#msgs + 1] = tostring(err) end
    end
    return msgs
end

local function assert_named(msgs, name, pattern)
    for _, m in ipairs(msgs) do
        assert.is_nil(m:find("'?'", 1, true), m)
        assert.is_nil(m:find("bad argument", 1, true), m)
        if pattern then
            assert.truthy(m:find(pattern), name .. " not named in: " .. m)
        else
            assert.truthy(m:find(name, 1, true), name .. " not named in: " .. m)
        end
    end
end

describe("misuse of an mf function", function()
    local all = functions_of(mf, "mf", {}, {})

    it("finds the functions of lua/README.md's contents", function()
        local names = {}
        for _, f in ipairs(all) do names[f.name] = true end
        for _, n in ipairs { "mf.sleep", "mf.timer.at", "mf.log", "mf.re.match",
                             "mf.http.get", "mf.socket.connect", "mf.redis",
                             "mf.mysql", "mf.kafka", "mf.shared_dict" } do
            assert.is_true(names[n], n)
        end
        assert.is_true(#all > 60, #all .. " functions")
    end)

    for _, f in ipairs(all) do
        if not skipped[f.name] then
            it("names " .. f.name, function()
                local msgs = raised(f.fn)
                if not takes_anything[f.name] then
                    assert.is_true(#msgs > 0, f.name .. " raised on nothing")
                end
                assert_named(msgs, f.name)
            end)
        end
    end

    it("reads like the rest: what was expected and what came", function()
        local function msg(fn, ...)
            local ok, err = pcall(fn, ...)
            assert.is_false(ok)
            return (err:gsub("^.-:%d+: ", ""))
        end
        assert.equals("mf.sleep(ms): a number expected, got string",
            msg(mf.sleep, "x"))
        assert.equals("mf.timer.at(ms, fn, ...): fn: a function expected, got string",
            msg(mf.timer.at, 1, "nope"))
        assert.equals("mf.log(level, ...): level: a string expected, got no value",
            msg(mf.log))
        assert.equals("mf.re.match(s, re [, opts [, init]]): re: a string expected, got table",
            msg(mf.re.match, "s", {}))
        assert.equals("mf.socket.connect(host, port [, opts]): port: a number expected, got table",
            msg(mf.socket.connect, "127.0.0.1", {}))
    end)
end)

-- The methods of an object: its metatable's __index table (debug's: the
-- objects hide their metatables), each called with a wrong self and with
-- wrong arguments after the right one.
local function methods_of(obj)
    local index = debug.getmetatable(obj).__index
    local out = {}
    for k, v in pairs(index) do
        if type(v) == "function" then out[#out + 1] = k end
    end
    table.sort(out)
    return out
end

-- skip: methods left out; waits: methods that wait when called with no
-- argument (sub:next()), called with wrong ones only.
local function check_methods(label, obj, skip, waits)
    for _, m in ipairs(methods_of(obj)) do
        if not (skip and skip[m]) then
            local fn = obj[m]
            -- "sock:connect(", "m:inc(": the object's name, the method's
            local pattern = "%a+:" .. m .. "[%(%{:]"
            assert_named(raised(fn), label .. ":" .. m, pattern)
            -- booleans only: a table may be a right type (k:produce's
            -- message), whose contents are checked by the method's specs
            local sets = { { true }, { true, true } }
            if not (waits and waits[m]) then table.insert(sets, 1, {}) end
            assert_named(raised(fn, { obj }, sets), label .. ":" .. m, pattern)
        end
    end
end

describe("misuse of a method", function()
    it("names sock:connect and the other cosocket methods", function()
        local sock = mf.socket.tcp()
        check_methods("sock", sock)
        local ok, err = pcall(sock.connect, sock, "127.0.0.1", "x")
        assert.is_false(ok)
        assert.matches("sock:connect(host, port [, opts]): port: a number expected, got string",
            err, 1, true)
        sock:close()
        local u = mf.socket.udp()
        check_methods("u", u)
        u:close()
    end)

    it("names r:call, db:query, k:produce and their siblings", function()
        local r = mf.redis(assert(os.getenv("MF_REDIS_URL")))
        check_methods("r", r, { subscribe = true, psubscribe = true, ssubscribe = true })
        local db = mf.mysql(assert(os.getenv("MF_MYSQL_URL")))
        check_methods("db", db)
        local ok, err = pcall(db.query, db, 42)
        assert.is_false(ok)
        assert.matches("db:query(sql, ...): sql: a string expected, got number", err, 1, true)
        local k = mf.kafka { ["bootstrap.servers"] = assert(os.getenv("MF_KAFKA_BROKERS")) }
        check_methods("k", k, { consumer = true })
        ok, err = pcall(k.produce, k, "topic")
        assert.is_false(ok)
        assert.matches("k:produce(msg): a table expected, got string", err, 1, true)
    end)

    it("names the methods of a subscription, a pinned connection and a consumer", function()
        local r = mf.redis(assert(os.getenv("MF_REDIS_URL")))
        local sub = assert(r:subscribe("errors-spec"))
        check_methods("sub", sub, nil, { next = true, messages = true })
        sub:close()
        local db = mf.mysql(assert(os.getenv("MF_MYSQL_URL")))
        db:session(function(s) check_methods("db", s) end)
        local k = mf.kafka { ["bootstrap.servers"] = assert(os.getenv("MF_KAFKA_BROKERS")) }
        local c = k:consumer { group = "errors-spec", topics = { "errors-spec" },
            ["session.timeout.ms"] = 3000, ["heartbeat.interval.ms"] = 300 }
        check_methods("c", c, { close = true }, { messages = true, poll = true })
        c:close()
    end)

    it("names the methods of dicts, metrics and timer handles", function()
        check_methods("d", mf.shared_dict("errors_spec", 65536))
        check_methods("m", mf.metrics.counter("errors_spec_total", "misuse"))
        local h = mf.timer.at(60000, function() end)
        check_methods("handle", h)
        h:cancel()
    end)
end)

describe("a failure says what it is about", function()
    local dead = assert(os.getenv("MF_DEAD_PORT"))

    it("an HTTP URL the client cannot use: what is malformed", function()
        local r, err = mf.http.get("htp://x")
        assert.is_nil(r)
        assert.equals("invalid argument: malformed URL 'htp://x': "
            .. "scheme 'htp' (http:// or https:// expected)", err)
        r, err = mf.http.get("http://")
        assert.equals("invalid argument: malformed URL 'http://': no host", err)
        r, err = mf.http.get("http://u:s3cret@127.0.0.1:x/")
        assert.equals("invalid argument: malformed URL 'http://u:***@127.0.0.1:x/': "
            .. "port 'x' (1 to 65535 expected)", err)
    end)

    it("an HTTP connection that failed: the origin", function()
        local r, err = mf.http.get("http://127.0.0.1:" .. dead .. "/", { retries = 0 })
        assert.is_nil(r)
        assert.equals("connection refused: http://127.0.0.1:" .. dead, err)
        r, err = mf.http.get("http://nosuch.invalid/", { retries = 0 })
        assert.matches("^dns error: http://nosuch%.invalid:80", err)
    end)

    it("a TLS handshake that failed: the certificate check's verdict", function()
        local port = assert(os.getenv("MF_HTTPS_PORT"))
        local r, err = mf.http.get("https://127.0.0.1:" .. port .. "/", { retries = 0 })
        assert.is_nil(r)
        assert.matches("^tls error: https://127%.0%.0%.1:" .. port
            .. ": 18: self%-signed certificate$", err)
    end)

    it("Redis and MySQL URLs: the same words as HTTP's", function()
        local function raised_by(fn, url)
            local ok, err = pcall(fn, url)
            assert.is_false(ok)
            return (err:gsub("^.-:%d+: ", ""))
        end
        assert.equals("mf.redis(url [, opts]): malformed URL 'redis://:::bad': no host",
            raised_by(mf.redis, "redis://:::bad"))
        assert.equals("mf.mysql(url [, opts]): malformed URL 'mysql://u:***@:3306/db': no host",
            raised_by(mf.mysql, "mysql://u:s3cret@:3306/db"))
        assert.equals("mf.redis(url [, opts]): malformed URL 'http://127.0.0.1/': "
            .. "scheme 'http' (redis:// or rediss:// expected)",
            raised_by(mf.redis, "http://127.0.0.1/"))
    end)
end)

describe("a MySQL pool that cannot serve", function()
    local url = assert(os.getenv("MF_MYSQL_URL"))

    it("says its queue is full, not 'task error'", function()
        local small = mf.mysql(url, { pool = 1, queue = 1, queue_timeout = 5000 })
        local r = mf.parallel {
            mf.task.mysql(small, "SELECT SLEEP(0.3)"),
            mf.task.mysql(small, "SELECT 1"),
            mf.task.mysql(small, "SELECT 2"),
        }:wait()
        assert.equals("success", r[1].state)
        assert.equals("success", r[2].state)
        assert.equals("task error", r[3].state)
        assert.equals("task error: mysql: no free connection in the pool of 1 (queue full)",
            r[3].error)
    end)

    it("says how long it waited for a connection, unlike a query's timeout", function()
        local small = mf.mysql(url, { pool = 1, queue_timeout = 200 })
        local busy = mf.spawn(function() return small:query("SELECT SLEEP(0.6)") end)
        mf.sleep(50)
        local res, err = small:query("SELECT 1")
        assert.is_nil(res)
        assert.equals("timeout: mysql: waited 200 ms for a connection", err)
        local r = mf.task.mysql(small, "SELECT 1"):wait()
        assert.equals("timeout", r.state)
        assert.equals("timeout: mysql: waited 200 ms for a connection", r.error)
        assert(busy:wait())
        local quick = mf.mysql(url, { timeout = 200 })
        res, err = quick:query("SELECT SLEEP(2)")
        assert.is_nil(res)
        assert.equals("timeout: timed out", err)
    end)
end)
