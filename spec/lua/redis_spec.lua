-- mf.redis against the redis-servers run_specs.py starts: MF_REDIS_URL
-- (plain), MF_REDIS_AUTH_PORT (requirepass MF_REDIS_PASSWORD), and
-- MF_REDIS_FLAKY_URL, which GET /redis-kill and /redis-start on
-- MF_ODD_PORT kill -9 and restart.
local mf = require "moonflow"

local url = assert(os.getenv("MF_REDIS_URL"))
local dead_url = "redis://127.0.0.1:" .. assert(os.getenv("MF_DEAD_PORT"))
local auth_port = assert(os.getenv("MF_REDIS_AUTH_PORT"))
local password = assert(os.getenv("MF_REDIS_PASSWORD"))
local odd = "http://127.0.0.1:" .. assert(os.getenv("MF_ODD_PORT"))
local serve = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

local r = mf.redis(url)

local function counts()
    local c = mf.debug.counts()
    return { coroutines = c.coroutines, refs = c.refs, timers = c.timers,
             flows = c.flows }
end

local function settle()
    collectgarbage()
    mf.sleep(10)
    collectgarbage()
end

describe("mf.redis", function()
    it("gives the same object for the same URL and options", function()
        assert.are.equal(r, mf.redis(url))
        local a = mf.redis(url, { timeout = 1000, connect_timeout = 500 })
        assert.are.equal(a, mf.redis(url, { connect_timeout = 500, timeout = 1000 }))
        assert.are_not.equal(r, a)
    end)

    it("raises on a malformed URL or an unknown option", function()
        assert.has_error(function() mf.redis("http://127.0.0.1/") end)
        assert.has_error(function() mf.redis(url, { frobnicate = 1 }) end)
        assert.has_error(function() mf.redis(url, { timeout = "soon" }) end)
        assert.has_error(function() mf.redis(42) end)
    end)

    it("has mf.null, equal to mf.json.null", function()
        assert.are.equal("userdata", type(mf.null))
        assert.are.equal(mf.json.null, mf.null)
    end)
end)

describe("r:call", function()
    it("returns status replies as strings", function()
        assert.are.equal("OK", r:call("SET", "call:s", "v"))
        assert.are.equal("PONG", r:call("PING"))
    end)

    it("returns bulk strings, binary-safe, and NUL-byte keys", function()
        local key, value = "call:\0bin\0", "a\0b\r\n\0"
        assert.are.equal("OK", r:call("SET", key, value))
        assert.are.equal(value, r:call("GET", key))
        assert.are.equal(mf.null, r:call("GET", "call:\0"))
        assert.are.equal("", (r:call("SET", "call:empty", "") and r:call("GET", "call:empty")))
    end)

    it("returns integers as numbers and sends numbers as their digits", function()
        r:call("DEL", "call:n")
        assert.are.equal(1, r:call("INCR", "call:n"))
        assert.are.equal(1e15 + 1, r:call("INCRBY", "call:n", 1e15))
        assert.are.equal("1000000000000001", r:call("GET", "call:n"))
        r:call("SET", "call:f", 0.5)
        assert.are.equal("0.5", r:call("GET", "call:f"))
        assert.are.equal(-3, r:call("DECRBY", "call:neg", 3))
    end)

    it("returns nil as mf.null, arrays as tables, nested and with nils", function()
        assert.are.equal(mf.null, r:call("GET", "call:missing"))
        r:call("DEL", "call:list")
        assert.are.equal(3, r:call("RPUSH", "call:list", "a", "b", "c"))
        assert.are.same({ "a", "b", "c" }, r:call("LRANGE", "call:list", 0, -1))
        assert.are.same({}, r:call("LRANGE", "call:nolist", 0, -1))
        local v = r:call("EVAL", "return {1, {2, {'x', false}}, 'y', false}", 0)
        assert.are.same({ 1, { 2, { "x", mf.null } }, "y", mf.null }, v)
        local m = r:call("MGET", "call:s", "call:missing", "call:s")
        assert.are.same({ "v", mf.null, "v" }, m)
    end)

    it("returns nil, message for an error reply", function()
        r:call("SET", "call:str", "x")
        local v, err = r:call("INCR", "call:str")
        assert.is_nil(v)
        assert.truthy(err:match("^ERR "))
        v, err = r:call("NOSUCHCOMMAND")
        assert.is_nil(v)
        assert.truthy(err:match("^ERR unknown command"))
        v, err = r:call("LPUSH", "call:str", "x")
        assert.is_nil(v)
        assert.truthy(err:match("^WRONGTYPE"))
    end)

    it("gives status replies as {ok = ...} with status_table", function()
        local t = mf.redis(url, { status_table = true })
        assert.are.same({ ok = "OK" }, t:call("SET", "call:st", "OK"))
        assert.are.equal("OK", t:call("GET", "call:st"))
        assert.are.same({ { ok = "OK" }, { ok = "QUEUED" }, { { ok = "PONG" } } },
            t:pipeline { { "MULTI" }, { "PING" }, { "EXEC" } })
        assert.are.same({ ok = "PONG" }, mf.task.redis(t, "PING"):wait().value)
    end)

    it("sends long commands of numbers, as arguments and in a table", function()
        local nums = {}
        for i = 1, 5000 do nums[i] = i * 1000003 end
        r:call("DEL", "call:nums")
        assert.are.equal(5000, r:call("RPUSH", "call:nums", unpack(nums)))
        local cmd = { "RPUSH", "call:nums" }
        for i = 1, 20000 do cmd[i + 2] = -i - 0.5 end
        assert.are.same({ 25000 }, r:pipeline { cmd })
        local all = r:call("LRANGE", "call:nums", 0, -1)
        assert.are.equal("5000015000", all[5000])
        assert.are.equal("-1.5", all[5001])
        assert.are.equal("-20000.5", all[25000])
        r:call("DEL", "call:nums")
    end)

    it("raises on misuse", function()
        assert.has_error(function() r:call() end)
        assert.has_error(function() r:call("GET", {}) end)
        assert.has_error(function() r:call("GET", nil) end)
        assert.has_error(function() r.call(42, "PING") end)
    end)

    it("raises for a transaction split over calls, naming the forms that work",
        function()
            for _, cmd in ipairs { "MULTI", "exec", "Discard", "WATCH",
                "UNWATCH" } do
                local ok, err = pcall(r.call, r, cmd, "k")
                assert.is_false(ok)
                assert.truthy(err:find("a transaction cannot span calls",
                    1, true), err)
                assert.truthy(err:find('r:pipeline{{"MULTI"}, ..., {"EXEC"}}',
                    1, true), err)
                assert.truthy(err:find("mf.task.redis(r, {{\"MULTI\"}", 1,
                    true), err)
            end
            -- the raise points at the caller's line
            local _, err = pcall(function() r:call("MULTI") end)
            assert.truthy(err:match("redis_spec%.lua:%d+:"), err)
            -- and the supported forms work
            assert.are.same({ "OK", "QUEUED", { "PONG" } },
                r:pipeline { { "MULTI" }, { "PING" }, { "EXEC" } })
            assert.are.same({ "OK", "QUEUED", { "PONG" } },
                mf.task.redis(r, { { "MULTI" }, { "PING" }, { "EXEC" } })
                    :wait().values)
            assert.are.equal("PONG", r:call("PING"))
        end)

    it("round-trips a 64 MiB value", function()
        local big = string.rep("0123456789abcdef", 4 * 1024 * 1024)
        assert.are.equal("OK", r:call("SET", "call:big", big))
        local got = r:call("GET", "call:big")
        assert.are.equal(#big, #got)
        assert.is_true(got == big)
        got = nil
        big = nil
        r:call("DEL", "call:big")
        collectgarbage()
    end)

    it("waits in BLPOP on its own connection and returns mf.null on timeout", function()
        local t0 = mf.now()
        local fast = mf.parallel {
            mf.task.redis(r, "BLPOP", "call:nothing", 0.2),
            mf.task.redis(r, "PING"),
        }:wait()
        assert.are.equal(mf.null, fast[1].value)
        assert.are.equal("PONG", fast[2].value)
        assert.is_true(mf.now() - t0 >= 150)
        assert.are.equal(mf.null, r:call("BLPOP", "call:nothing", 0.1))
    end)

    it("BLPOP returns what another coroutine pushes", function()
        mf.timer.at(20, function() r:call("RPUSH", "call:q", "job") end)
        assert.are.same({ "call:q", "job" }, r:call("BLPOP", "call:q", 2))
    end)

    it("selects the URL's database", function()
        local db3 = mf.redis(url:gsub("/0$", "") .. "/3")
        assert.are.equal("OK", db3:call("SET", "call:db", "three"))
        assert.are.equal("three", db3:call("GET", "call:db"))
        assert.are.equal(mf.null, r:call("GET", "call:db"))
    end)

    it("says why Redis refused the URL's database", function()
        local db99 = mf.redis(url:gsub("/0$", "") .. "/99")
        local v, err = db99:call("PING")
        assert.is_nil(v)
        assert.are.equal("permission denied: ERR DB index is out of range", err)
        v, err = db99:pipeline { { "PING" }, { "PING" } }
        assert.is_nil(v)
        assert.are.equal("permission denied: ERR DB index is out of range", err)
        local res = mf.task.redis(db99, "PING"):wait()
        assert.are.equal("permission denied: ERR DB index is out of range",
            res.error)
    end)

    it("authenticates with the URL's password", function()
        local base = "redis://%s127.0.0.1:" .. auth_port
        local good = mf.redis(base:format(":" .. password .. "@"))
        assert.are.equal("PONG", good:call("PING"))
        local v, err = mf.redis(base:format(":wrong@")):call("PING")
        assert.is_nil(v)
        -- "permission denied" first (what callers matched before), then
        -- Redis's own reason.
        assert.truthy(err:match("^permission denied: WRONGPASS "), err)
        local sub, serr = mf.redis(base:format(":wrong@")):subscribe("auth:ch")
        assert.is_nil(sub)
        assert.truthy(serr:match("^permission denied: WRONGPASS "), serr)
        v, err = mf.redis(base:format("")):call("PING")
        assert.is_nil(v)
        assert.truthy(err:match("^NOAUTH"))
    end)

    it("talks TLS to a rediss:// URL, checking the certificate", function()
        local tls = assert(os.getenv("MF_REDIS_TLS_URL"))
        local ca = assert(os.getenv("MF_CA_FILE"))
        local c = mf.redis(tls, { ca_file = ca })
        assert.are.equal("OK", c:call("SET", "tls:k", "secret"))
        assert.are.equal("secret", c:call("GET", "tls:k"))
        local v, err = mf.redis(tls):call("PING") -- not in the system bundle
        assert.is_nil(v)
        assert.are.equal("tls error", err)
        assert.are.equal("PONG", mf.redis(tls, { verify = false }):call("PING"))
        local sub = c:subscribe("tls:ch")
        c:call("PUBLISH", "tls:ch", "over tls")
        assert.are.equal("over tls", sub:next(2000).payload)
        sub:close()
    end)

    it("returns nil, 'connection refused' when nothing listens", function()
        local v, err = mf.redis(dead_url):call("PING")
        assert.is_nil(v)
        assert.are.equal("connection refused", err)
        v, err = mf.redis(dead_url):pipeline { { "PING" } }
        assert.is_nil(v)
        assert.are.equal("connection refused", err)
    end)

    it("returns nil, 'message too long' for a reply over max_reply", function()
        local small = mf.redis(url, { max_reply = 1000 })
        r:call("SET", "call:long", string.rep("x", 10000))
        assert.are.same({ nil, "message too long" }, { small:call("GET", "call:long") })
        assert.are.equal("PONG", small:call("PING")) -- and goes on
    end)

    it("leaks nothing after calls, pipelines, tasks, failures and timeouts", function()
        settle()
        local base = counts()
        local dead = mf.redis(dead_url)
        for i = 1, 20 do
            r:call("SET", "call:leak", i)
            r:call("INCR", "call:str")
            dead:call("PING")
            r:pipeline { { "GET", "call:leak" }, { "LPUSH", "call:str", 1 } }
            mf.parallel {
                mf.task.redis(r, "BLPOP", "call:none", 1, { timeout = 5 }),
                mf.task.redis(dead, "PING", { callback = function() end }),
                mf.task.redis(r, { { "GET", "call:leak" } }),
            }:wait()
        end
        settle()
        assert.are.same(base, counts())
    end)

    it("shares one connection between concurrent calls", function()
        local c = mf.redis(url, { pipeline_connections = 1 })
        assert.are.equal("PONG", c:call("PING"))
        local before = c:connects()
        local done = 0
        for i = 1, 50 do
            mf.timer.at(0, function()
                assert(c:call("SET", "call:conc:" .. i, i))
                done = done + 1
            end)
        end
        for _ = 1, 200 do
            if done == 50 then break end
            mf.sleep(5)
        end
        assert.are.equal(50, done)
        assert.are.equal(before, c:connects())
    end)
end)

describe("r:pipeline", function()
    it("runs 1,000 commands and returns one result each, in order", function()
        r:call("DEL", "pipe:n")
        local cmds = {}
        for i = 1, 1000 do cmds[i] = { "INCR", "pipe:n" } end
        local res = assert(r:pipeline(cmds))
        assert.are.equal(1000, #res)
        for i = 1, 1000 do assert.are.equal(i, res[i]) end
    end)

    it("keeps the other results when one command fails", function()
        r:call("DEL", "pipe:a")
        local res = assert(r:pipeline {
            { "SET", "pipe:a", "1" },
            { "LPUSH", "pipe:a", "x" },
            { "GET", "pipe:a" },
            { "GET", "pipe:missing" },
        })
        assert.are.equal("OK", res[1])
        assert.are.equal("table", type(res[2]))
        assert.truthy(res[2].err:match("^WRONGTYPE"))
        assert.are.equal("1", res[3])
        assert.are.equal(mf.null, res[4])
    end)

    it("runs MULTI ... EXEC atomically", function()
        r:call("DEL", "pipe:m")
        local res = assert(r:pipeline {
            { "MULTI" }, { "INCR", "pipe:m" }, { "INCRBY", "pipe:m", 10 },
            { "EXEC" },
        })
        assert.are.same({ "OK", "QUEUED", "QUEUED", { 1, 11 } }, res)
        res = assert(r:pipeline {
            { "MULTI" }, { "SET", "pipe:m", "x" }, { "INCR", "pipe:m" },
            { "EXEC" },
        })
        assert.are.equal("OK", res[4][1])
        assert.truthy(res[4][2].err:match("^ERR")) -- an error inside EXEC
    end)

    it("returns an empty list for no commands and raises on misuse", function()
        assert.are.same({}, r:pipeline {})
        assert.has_error(function() r:pipeline { "GET", "x" } end)
        assert.has_error(function() r:pipeline { {} } end)
        assert.has_error(function() r:pipeline() end)
    end)
end)

describe("r:session", function()
    -- fn's results, or a failure after 2 s instead of a wait for a
    -- connection that never comes back
    local function bounded(fn)
        local res = mf.task.lua { fn = fn, timeout = 2000 }:wait()
        assert.are.equal("success", res.state, res.error)
        return unpack(res.values, 1, res.values.n)
    end

    it("holds one connection: WATCH ... MULTI ... EXEC across calls, fn's results returned",
        function()
            r:call("SET", "sess:a", 1)
            local res, second = r:session(function(s)
                assert.are.equal("OK", s:call("WATCH", "sess:a"))
                local v = tonumber(s:call("GET", "sess:a"))
                assert.are.equal("OK", s:call("MULTI"))
                assert.are.equal("QUEUED", s:call("SET", "sess:a", v + 1))
                return s:call("EXEC"), "second"
            end)
            assert.are.same({ "OK" }, res)
            assert.are.equal("second", second)
            assert.are.equal("2", r:call("GET", "sess:a"))
            -- error replies come as from r:call
            assert.are.same({ nil, "ERR EXEC without MULTI" },
                { r:session(function(s) return s:call("EXEC") end) })
        end)

    it("gets mf.null from EXEC when a watched key changed meanwhile", function()
        r:call("SET", "sess:w", "old")
        local res = r:session(function(s)
            s:call("WATCH", "sess:w")
            r:call("SET", "sess:w", "other") -- another connection
            s:call("MULTI")
            s:call("SET", "sess:w", "mine")
            return s:call("EXEC")
        end)
        assert.are.equal(mf.null, res)
        assert.are.equal("other", r:call("GET", "sess:w"))
    end)

    it("hands the connection back clean after an error in fn, and raises it again",
        function()
            local c = mf.redis(url, { max_connections = 1, idle_timeout = 60001 })
            assert.are.equal("PONG", c:session(function(s) return s:call("PING") end))
            local before = c:connects()
            local ok, err = pcall(c.session, c, function(s)
                s:call("WATCH", "sess:e")
                s:call("MULTI")
                s:call("SET", "sess:e", "lost")
                error("boom")
            end)
            assert.is_false(ok)
            assert.truthy(err:find("redis_spec%.lua:%d+: boom"), err)
            assert.truthy(err:find("stack traceback:", 1, true), err)
            -- the next user of the one connection finds no MULTI, no WATCH
            r:call("SET", "sess:e", "changed")
            local res = bounded(function()
                return c:session(function(s)
                    local exec = { s:call("EXEC") }
                    s:call("MULTI")
                    s:call("SET", "sess:e", "kept")
                    return exec, s:call("EXEC")
                end)
            end)
            assert.are.same({ nil, "ERR EXEC without MULTI" }, res)
            assert.are.equal("kept", r:call("GET", "sess:e"))
            assert.are.equal(before, c:connects()) -- cleaned, not closed
            -- an error value that is not a string goes through as it is
            local e = { code = 7 }
            local _, got = pcall(c.session, c, function() error(e) end)
            assert.are.equal(e, got)
        end)

    it("puts a SELECTed connection back on the URL's database, RESETs other state",
        function()
            local c = mf.redis(url, { max_connections = 1, idle_timeout = 60002 })
            c:session(function(s)
                s:call("SELECT", 5)
                s:call("SET", "sess:db", "five")
            end)
            local before = c:connects()
            bounded(function()
                c:session(function(s) s:call("SET", "sess:db", "zero") end)
            end)
            assert.are.equal("zero", r:call("GET", "sess:db"))
            c:session(function(s)
                s:call("CLIENT", "SETNAME", "sess")
                s:call("SELECT", 6)
            end)
            assert.are.same({ mf.null, "seen" }, bounded(function()
                return c:session(function(s)
                    return { s:call("CLIENT", "GETNAME"),
                        s:call("SET", "sess:db2", "seen") and
                        r:call("GET", "sess:db2") }
                end)
            end))
            assert.are.equal(before, c:connects()) -- cleaned, not closed
        end)

    it("raises on misuse: nested, s after the session, pub/sub, no function",
        function()
            assert.has_error(function() r:session() end,
                "r:session(fn): fn must be a function, got nil")
            local ok, err = pcall(r.session, r, function()
                r:session(function() end)
            end)
            assert.is_false(ok)
            assert.truthy(err:find("in a session of this client already", 1,
                true), err)
            -- another client's session inside is fine
            assert.are.equal("PONG", r:session(function()
                return mf.redis(url, { max_connections = 2 }):session(
                    function(s2) return s2:call("PING") end)
            end))
            local kept = r:session(function(s) return s end)
            ok, err = pcall(kept.call, kept, "PING")
            assert.is_false(ok)
            assert.truthy(err:find("the session is over", 1, true), err)
            ok, err = pcall(r.session, r, function(s)
                s:call("SUBSCRIBE", "sess:ch")
            end)
            assert.is_false(ok)
            assert.truthy(err:find("use r:subscribe", 1, true), err)
            ok, err = pcall(r.session, r, function(s) s:call() end)
            assert.is_false(ok)
            assert.truthy(err:find("s:call: a command expected", 1, true), err)
            -- r:call still refuses a transaction, and names r:session
            ok, err = pcall(r.call, r, "WATCH", "k")
            assert.is_false(ok)
            assert.truthy(err:find("r:session(function(s)", 1, true), err)
        end)

    it("counts exactly with an optimistic lock from 40 coroutines", function()
        local c = mf.redis(url, { max_connections = 8 })
        r:call("DEL", "sess:ctr")
        local retries = 0
        local function increment()
            for _ = 1, 1000 do
                local committed = c:session(function(s)
                    s:call("WATCH", "sess:ctr")
                    local v = tonumber(s:call("GET", "sess:ctr")) or 0
                    mf.sleep(0) -- let the others read the same value
                    s:call("MULTI")
                    s:call("SET", "sess:ctr", v + 1)
                    return s:call("EXEC") ~= mf.null
                end)
                if committed then return end
                retries = retries + 1
            end
            error("no progress")
        end
        local threads = {}
        for i = 1, 40 do
            threads[i] = mf.spawn(function()
                for _ = 1, 5 do increment() end
            end)
        end
        for i = 1, 40 do threads[i]:wait() end
        assert.are.equal("200", r:call("GET", "sess:ctr"))
        assert.is_true(retries > 0) -- they did collide
        assert.is_true(c:connects() <= 8)
    end)

    it("hands the connection back when the coroutine is stopped", function()
        local base = counts()
        local c = mf.redis(url, { max_connections = 1, idle_timeout = 60003 })
        -- stopped while fn sleeps, its session in MULTI: cleaned, reused
        assert.are.equal("PONG", c:session(function(s) return s:call("PING") end))
        local before = c:connects()
        local res = mf.task.lua { fn = function()
            c:session(function(s)
                s:call("MULTI")
                mf.sleep(5000)
            end)
        end, timeout = 30 }:wait()
        assert.are.equal("timeout", res.state)
        assert.are.same({ nil, "ERR EXEC without MULTI" }, bounded(function()
            return c:session(function(s) return { s:call("EXEC") } end)
        end))
        assert.are.equal(before, c:connects())
        -- stopped while it waits in s:call: the connection is closed (its
        -- reply may still come), and the next session opens another
        res = mf.task.lua { fn = function()
            c:session(function(s) s:call("BLPOP", "sess:never", 5) end)
        end, timeout = 30 }:wait()
        assert.are.equal("timeout", res.state)
        assert.are.equal("PONG", bounded(function()
            return c:session(function(s) return s:call("PING") end)
        end))
        assert.are.equal(before + 1, c:connects())
        -- stopped while it waits for the pool's one connection
        local holder = mf.spawn(function()
            c:session(function() mf.sleep(100) end)
        end)
        res = mf.task.lua { fn = function()
            c:session(function() end)
        end, timeout = 30 }:wait()
        assert.are.equal("timeout", res.state)
        holder:wait()
        assert.are.equal("PONG", bounded(function()
            return c:session(function(s) return s:call("PING") end)
        end))
        settle()
        assert.are.same(base, counts())
    end)
end)

describe("mf.task.redis", function()
    it("runs in a parallel with callbacks", function()
        local seen = {}
        local res = mf.parallel {
            mf.task.redis(r, "SET", "task:p", "v", {
                callback = function(t) seen[#seen + 1] = t.value end }),
            mf.task.redis(r, { "PING" }, {
                callback = function(t) seen[#seen + 1] = t.value end }),
            mf.task.redis(r, { { "DEL", "task:none" }, { "GET", "task:none" } }),
        }:wait()
        assert.are.equal("success", res[1].state)
        assert.are.equal("OK", res[1].value)
        assert.are.equal("PONG", res[2].value)
        assert.are.same({ 0, mf.null }, res[3].values)
        table.sort(seen)
        assert.are.same({ "OK", "PONG" }, seen)
    end)

    it("runs in a series, and callbacks may push more steps", function()
        local pushed = false
        local res = mf.series {
            mf.task.redis(r, "SET", "task:s", 1),
            mf.task.redis(r, { { "INCR", "task:s" }, { "GET", "task:s" } }, {
                callback = function(t, flow)
                    pushed = true
                    flow:push(mf.task.redis(r, "INCRBY", "task:s", t.values[1]))
                end }),
        }:wait()
        assert.is_true(pushed)
        assert.are.equal("OK", res[1].value)
        assert.are.same({ 2, "2" }, res[2].values)
        assert.are.equal(4, res[3].value)
    end)

    it("gives an error reply as value.err and a dead server as state", function()
        r:call("SET", "task:str", "x")
        local res = mf.parallel {
            mf.task.redis(r, "INCR", "task:str"),
            mf.task.redis(mf.redis(dead_url), "PING"),
        }:wait()
        assert.are.equal("success", res[1].state)
        assert.truthy(res[1].value.err:match("^ERR"))
        assert.are.equal("system error", res[2].state)
        assert.are.equal("connection refused", res[2].error)
        assert.is_nil(res[2].value)
    end)

    it("ends with 'timeout' after its own timeout", function()
        local t0 = mf.now()
        local res = mf.task.redis(r, "BLPOP", "task:never", 5, { timeout = 50 }):wait()
        assert.are.equal("timeout", res.state)
        assert.are.equal("timeout", res.error)
        assert.is_true(mf.now() - t0 < 2000)
        assert.are.equal("PONG", r:call("PING")) -- the client goes on
    end)

    it("keeps the shared connection in step after a timed-out call", function()
        r:call("SET", "task:big", string.rep("b", 16 * 1024 * 1024))
        r:call("SET", "task:small", "small")
        local res = mf.parallel {
            mf.task.redis(r, "GET", "task:big", { timeout = 1 }),
            mf.task.redis(r, "GET", "task:small"),
        }:wait()
        assert.are.equal("small", res[2].value)
        assert.are.equal("small", r:call("GET", "task:small"))
        assert.are.equal(16 * 1024 * 1024, #r:call("GET", "task:big"))
        r:call("DEL", "task:big")
    end)

    it("does not leave a timed-out BLPOP waiting on the server", function()
        r:call("DEL", "task:zombie")
        local res = mf.task.redis(r, "BLPOP", "task:zombie", 5, { timeout = 30 }):wait()
        assert.are.equal("timeout", res.state)
        mf.sleep(50)
        assert.are.equal(1, r:call("RPUSH", "task:zombie", "v"))
        mf.sleep(50)
        assert.are.equal(1, r:call("LLEN", "task:zombie")) -- nobody popped it
        assert.are.same({ "task:zombie", "v" }, r:call("BLPOP", "task:zombie", 1))
    end)

    it("sends a description waited on again as it is at each wait", function()
        r:call("DEL", "task:again")
        local step = mf.task.redis(r, "INCRBY", "task:again", 1)
        for i = 1, 5 do -- prepared from the second wait on
            assert.are.equal(i, step:wait().value)
        end
        step.cmds[1][3] = 10 -- a changed argument is sent
        assert.are.equal(15, step:wait().value)
        assert.are.equal(25, step:wait().value)
        step.cmds[1][2] = "task:again2" -- a changed key
        assert.are.equal(10, step:wait().value)
        step.cmds[1] = { "GET", "task:again" } -- a new command table
        assert.are.equal("25", step:wait().value)
        step.cmds[2] = { "GET", "task:again2" } -- one more command
        step.list = true
        assert.are.same({ "25", "10" }, step:wait().values)
        step.cmds[1][3] = "extra" -- a longer command: Redis says so
        assert.truthy(step:wait().values[1].err:match("^ERR"))
        step.cmds[1][3] = nil
        assert.are.same({ "25", "10" }, step:wait().values)
    end)

    it("sends a prebuilt list of commands again, in flows and alone", function()
        r:call("DEL", "task:list")
        local cmds = {}
        for i = 1, 16 do cmds[i] = { "INCR", "task:list" } end
        local step = mf.task.redis(r, cmds)
        local flow = mf.series { step, mf.task.redis(r, "GET", "task:list") }
        for i = 1, 3 do
            assert.are.equal(16 * (2 * i - 1), step:wait().values[16])
            local res = flow:wait()
            assert.are.equal(16 * (2 * i), res[1].values[16])
            assert.are.equal(tostring(32 * i), res[2].value)
        end
        cmds[16] = { "INCRBY", "task:list", 100 }
        assert.are.equal(96 + 15 + 100, step:wait().values[16])
        cmds[16] = { "INCRBY", "task:list", {} } -- checked as at first
        assert.has_error(function() step:wait() end,
            "redis task: argument 3 must be a string or a number, got table")
    end)

    it("raises on a step that is not a redis client", function()
        assert.has_error(function() mf.task.redis("x", "PING") end)
        local Step = getmetatable(mf.task.timer(1))
        assert.has_error(function() -- the C side checks the client too
            setmetatable({ kind = "redis", client = {}, cmds = { { "PING" } } },
                Step):wait()
        end, "redis task: client must be an mf.redis object")
        assert.has_error(function() mf.task.redis(r, {}):wait() end)
    end)
end)

describe("pub/sub", function()
    it("delivers 10,000 messages in order", function()
        local sub = r:subscribe("ps:bulk")
        mf.timer.at(0, function()
            for i = 1, 10000 do r:call("PUBLISH", "ps:bulk", i) end
        end)
        for i = 1, 10000 do
            local msg, err = sub:next(5000)
            assert(msg, err)
            if msg.payload ~= tostring(i) then
                error(("message %d: got %s"):format(i, msg.payload))
            end
        end
        assert.are.same({ nil, "timeout" }, { sub:next(20) })
        sub:close()
    end)

    it("returns message tables, and pattern messages with their pattern", function()
        local sub = r:subscribe("ps:a", "ps:b")
        local psub = r:psubscribe("ps:p.*")
        r:call("PUBLISH", "ps:a", "one")
        r:call("PUBLISH", "ps:b", "two\0bin")
        r:call("PUBLISH", "ps:p.x", "three")
        assert.are.same({ kind = "message", channel = "ps:a", payload = "one" },
            sub:next(2000))
        assert.are.same({ kind = "message", channel = "ps:b", payload = "two\0bin" },
            sub:next(2000))
        assert.are.same({ kind = "pmessage", pattern = "ps:p.*", channel = "ps:p.x",
                          payload = "three" }, psub:next(2000))
        sub:close()
        psub:close()
    end)

    it("queues messages while nobody waits, and iterates with messages()", function()
        local sub = r:subscribe("ps:q")
        for i = 1, 10 do r:call("PUBLISH", "ps:q", i) end
        mf.sleep(20)
        local got = {}
        for msg in sub:messages(200) do got[#got + 1] = tonumber(msg.payload) end
        assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, got)
        sub:close()
    end)

    it("adds and drops channels on a live subscriber", function()
        local sub = r:subscribe("ps:x")
        assert.is_true(sub:subscribe("ps:y"))
        r:call("PUBLISH", "ps:y", "why")
        assert.are.equal("why", sub:next(2000).payload)
        assert.is_true(sub:unsubscribe("ps:x"))
        assert.are.equal(0, r:call("PUBLISH", "ps:x", "gone"))
        assert.are.equal(1, r:call("PUBLISH", "ps:y", "still"))
        assert.are.equal("still", sub:next(2000).payload)
        assert.is_true(sub:psubscribe("ps:z*"))
        assert.are.equal(1, r:call("PUBLISH", "ps:zed", "pattern"))
        assert.are.equal("pattern", sub:next(2000).payload)
        assert.is_true(sub:unsubscribe()) -- every channel
        assert.are.same({ "ps:y", 0 }, r:call("PUBSUB", "NUMSUB", "ps:y"))
        assert.are.equal(1, r:call("PUBLISH", "ps:zed", "patterns stay"))
        assert.is_true(sub:punsubscribe())
        assert.are.equal(0, r:call("PUBLISH", "ps:zed", "none"))
        sub:close()
    end)

    it("returns from r:subscribe subscribed: a publish right after arrives", function()
        for i = 1, 20 do
            local sub = assert(r:subscribe("ps:now" .. i))
            assert.are.equal(1, r:call("PUBLISH", "ps:now" .. i, "hi"))
            assert.are.equal("hi", sub:next(2000).payload)
            sub:close()
        end
        local sub, err = mf.redis(dead_url):subscribe("ps:none")
        assert.is_nil(sub)
        assert.are.equal("connection refused", err)
    end)

    it("times out, and ends with 'closed' after close()", function()
        local sub = r:subscribe("ps:t")
        local msg, err = sub:next(30)
        assert.is_nil(msg)
        assert.are.equal("timeout", err)
        msg, err = sub:next(0)
        assert.are.equal("timeout", err)
        mf.timer.at(20, function() sub:close() end)
        msg, err = sub:next(2000)
        assert.is_nil(msg)
        assert.are.equal("closed", err)
        assert.are.same({ nil, "closed" }, { sub:next() })
        assert.are.same({ nil, "closed" }, { sub:subscribe("ps:u") })
    end)

    it("ends with 'queue overflow' past max_queued, after the queued ones", function()
        local c = mf.redis(url, { max_queued = 5 })
        local sub = c:subscribe("ps:o")
        for i = 1, 10 do r:call("PUBLISH", "ps:o", i) end
        mf.sleep(50)
        for i = 1, 5 do assert.are.equal(tostring(i), sub:next(1000).payload) end
        assert.are.same({ nil, "queue overflow" }, { sub:next(1000) })
        sub:close()
    end)

    it("may be closed by the coroutine it resumes, mid-burst", function()
        local sub = r:subscribe("ps:burst")
        r:pipeline { { "PUBLISH", "ps:burst", 1 }, { "PUBLISH", "ps:burst", 2 },
                     { "PUBLISH", "ps:burst", 3 } }
        assert.are.equal("1", sub:next(2000).payload)
        sub:close()
        assert.are.same({ nil, "closed" }, { sub:next(100) })
        local other = r:subscribe("ps:burst2")
        mf.timer.at(0, function()
            r:pipeline { { "PUBLISH", "ps:burst2", "a" },
                         { "PUBLISH", "ps:burst2", "b" } }
        end)
        assert.are.equal("a", other:next(2000).payload) -- resumed by the
        other:close()                                   -- message callback
        mf.sleep(20)
        assert.are.same({ nil, "closed" }, { other:next() })
    end)

    it("raises on a subscription to nothing or to a non-string", function()
        assert.has_error(function() r:subscribe() end, "r:subscribe: a channel expected")
        assert.has_error(function() r:psubscribe({}) end)
        local sub = r:subscribe("ps:misuse")
        assert.has_error(function() sub:subscribe() end)
        assert.has_error(function() sub.next(r) end)
        sub:close()
    end)

    it("raises when two coroutines wait on one subscriber", function()
        local sub = r:subscribe("ps:two")
        local err
        mf.timer.at(0, function() sub:next(100) end)
        mf.sleep(10)
        local ok, e = pcall(sub.next, sub, 10)
        err = e
        assert.is_false(ok)
        assert.truthy(err:match("another coroutine"))
        mf.sleep(150)
        sub:close()
    end)

    it("leaks nothing after close and garbage collection", function()
        settle()
        local base = counts()
        for i = 1, 10 do
            local sub = r:subscribe("ps:leak" .. i)
            if i % 2 == 0 then sub:close() end
        end
        local sub = r:subscribe("ps:leakq")
        r:call("PUBLISH", "ps:leakq", "queued")
        mf.sleep(20)
        sub = nil -- collected with a message queued
        settle()
        mf.sleep(50)
        assert.are.same(base, counts())
        assert.is_nil(sub)
        for _ = 1, 200 do -- the collected subscriber's connection closes
            if r:call("PUBSUB", "NUMSUB", "ps:leakq")[2] == 0 then break end
            mf.sleep(5)
        end
        assert.are.equal(0, r:call("PUBSUB", "NUMSUB", "ps:leakq")[2])
    end)
end)

describe("a redis server that goes away", function()
    local flaky = mf.redis(assert(os.getenv("MF_REDIS_FLAKY_URL")))

    it("fails the calls while down and serves again once back", function()
        assert.are.equal("OK", flaky:call("SET", "flaky:k", "v"))
        local sub = flaky:subscribe("flaky:ch")
        assert(mf.http.get(odd .. "/redis-kill"))
        local v, err = flaky:call("GET", "flaky:k")
        assert.is_nil(v)
        assert.truthy(err == "connection refused" or err == "connection reset"
            or err == "connection closed", err)
        local msg, serr = sub:next(2000)
        assert.is_nil(msg)
        assert.are.equal("connection closed", serr)
        local res = mf.task.redis(flaky, "PING"):wait()
        assert.are_not.equal("success", res.state)
        assert(mf.http.get(odd .. "/redis-start"))
        local ok
        for _ = 1, 100 do
            ok = flaky:call("PING")
            if ok then break end
            mf.sleep(20)
        end
        assert.are.equal("PONG", ok)
        assert.are.equal(mf.null, flaky:call("GET", "flaky:k")) -- a new server
    end)
end)

describe("redis under moonflow serve", function()
    local function get(path, opts)
        return mf.http.get(serve .. path, opts)
    end

    it("answers from a handler that uses redis", function()
        local res = assert(get("/redis?key=serve:k&value=hello"))
        assert.are.equal(200, res.status)
        assert.are.equal("hello", res.body)
        assert.are.equal("hello", r:call("GET", "serve:k"))
    end)

    it("leaks nothing when handlers waiting in r:call, sub:next or r:session are aborted", function()
        local kinds = { "call", "sub", "session", "session_call" }
        for _, what in ipairs(kinds) do
            assert(get("/redis_wait?what=" .. what .. "&ms=1"))
        end
        local before = mf.json.decode(assert(get("/counts")).body)
        for i = 1, 12 do
            local what = kinds[i % 4 + 1]
            local res, err = get("/redis_wait?what=" .. what .. "&ms=3000",
                { timeout = 30 })
            assert.is_nil(res)
            assert.are.equal("timeout", err)
        end
        mf.sleep(200) -- the server sees the closes and aborts the handlers
        -- the sessions' one connection is back: a session gets it at once
        local res = assert(get("/redis_wait?what=session&ms=1", { timeout = 2000 }))
        assert.are.equal("waited", res.body)
        local after = mf.json.decode(assert(get("/counts")).body)
        assert.are.equal(before.coroutines, after.coroutines)
        assert.are.equal(before.refs, after.refs)
        assert.are.equal(before.timers, after.timers)
        for _ = 1, 200 do -- the aborted subscribers' connections close
            if r:call("PUBSUB", "NUMSUB", "serve:wait")[2] == 0 then break end
            mf.sleep(5)
        end
        assert.are.equal(0, r:call("PUBSUB", "NUMSUB", "serve:wait")[2])
    end)
end)
