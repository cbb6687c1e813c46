-- mf.limit: req (leaky bucket, on a clock the spec moves), count (its
-- window resets), conn (slots given back), each local in a shared dict and
-- cluster-wide in the harness's redis-server (MF_REDIS_URL), and what a
-- limit does when its Redis is down (MF_DEAD_PORT: nothing listens).
local mf = require "moonflow"

local url = assert(os.getenv("MF_REDIS_URL"))
local dead_url = "redis://127.0.0.1:" .. assert(os.getenv("MF_DEAD_PORT"))
local d = mf.shared_dict("limit_spec", 1048576)

local n = 0
local function fresh(what) -- a key no other test (or run) has used
    n = n + 1
    return what .. ":" .. n .. ":" .. mf.hex.encode(mf.crypto.random(6))
end

local function raises(pattern, fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err), 1, true)
end

describe("mf.limit arguments", function()
    it("names the function and the option", function()
        raises("mf.limit.req(opts): a table expected, got string", mf.limit.req, "x")
        raises("mf.limit.req(opts): rate: a number >= 0 expected, got nil",
            mf.limit.req, { dict = d })
        raises("mf.limit.req(opts): rate: a number > 0 expected, got 0",
            mf.limit.req, { rate = 0, dict = d })
        raises("mf.limit.req(opts): burst: a number >= 0 expected, got -1",
            mf.limit.req, { rate = 1, burst = -1, dict = d })
        raises("mf.limit.req(opts): dict: no shared dict 'nosuch'",
            mf.limit.req, { rate = 1, dict = "nosuch" })
        raises("mf.limit.req(opts): dict: a shared dict or its name expected, got nil",
            mf.limit.req, { rate = 1 })
        raises("mf.limit.req(opts): status: an HTTP status from 400 to 599 expected, got 200",
            mf.limit.req, { rate = 1, dict = d, status = 200 })
        raises("mf.limit.req(opts): clock: a function giving ms expected, got number",
            mf.limit.req, { rate = 1, dict = d, clock = 5 })
        raises('mf.limit.count(opts): on_redis_error: "local", "allow" or "deny" expected, got maybe',
            mf.limit.count, { limit = 1, window = 1, redis = url, on_redis_error = "maybe" })
        raises('mf.limit.conn(opts): on_redis_error = "local" needs dict',
            mf.limit.conn, { max = 1, redis = url, on_redis_error = "local" })
        raises("mf.limit.conn(opts): redis: a redis:// URL or an mf.redis client expected, got table",
            mf.limit.conn, { max = 1, redis = {} })
        raises("mf.limit.count(opts): window: a number of seconds > 0 expected, got 0",
            mf.limit.count, { limit = 1, window = 0, dict = d })
        raises("mf.limit.conn(opts): max: a number >= 1 expected, got 0",
            mf.limit.conn, { max = 0, dict = d })
        local lim = mf.limit.req { rate = 1, dict = "limit_spec" }
        raises("lim:incoming(key, commit): key: a non-empty string expected, got table",
            lim.incoming, lim, {})
        raises("lim:incoming(key, commit): key: a non-empty string expected, got an empty string",
            lim.incoming, lim, "")
        raises("lim:uncommit(key): key: a non-empty string expected, got nil", lim.uncommit, lim)
        local c = mf.limit.conn { max = 1, dict = d }
        raises("lim:leaving(key [, req_latency]): req_latency: a number of seconds >= 0 expected, got -1",
            c.leaving, c, "k", -1)
    end)
end)

describe("mf.limit.req", function()
    it("lets one request through each 1/rate s, holds burst with its delay", function()
        local now = 1000
        local lim = mf.limit.req { rate = 200, burst = 0, dict = d, clock = function() return now end }
        local k = fresh("req")
        assert.are.same({ 0, 0 }, { lim:incoming(k, true) })
        now = 1004
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        now = 1005
        assert.are.same({ 0, 0 }, { lim:incoming(k, true) })
        -- 10 r/s, burst 2, at one instant: delays 0, 0.1, 0.2, then refused
        local b = mf.limit.req { rate = 10, burst = 2, dict = d, clock = function() return now end }
        local kb = fresh("burst")
        for i = 0, 2 do
            local delay, excess = b:incoming(kb, true)
            assert.are.equal(i, excess)
            assert.is_true(math.abs(delay - i / 10) < 1e-9)
        end
        assert.are.same({ nil, "rejected" }, { b:incoming(kb, true) })
        -- a look (commit false) counts nothing; uncommit takes one back
        assert.are.same({ nil, "rejected" }, { b:incoming(kb) })
        assert.are.equal(1, b:uncommit(kb))
        assert.are.equal(2, select(2, b:incoming(kb, false)))
        -- 150 ms leak 1.5 requests: 1 - 1.5 + 1
        now = now + 150
        assert.are.equal(0.5, select(2, b:incoming(kb, true)))
    end)

    it("waits the delay and answers in allow()", function()
        local lim = mf.limit.req { rate = 20, burst = 1, dict = d }
        local k = fresh("allow")
        assert.is_true(lim:allow(k))
        local t0 = mf.now()
        assert.is_true(lim:allow(k)) -- in the burst: waits about 50 ms
        assert.is_true(mf.now() - t0 >= 40)
        -- past the burst: refused (a second's rate: no sleep of this
        -- process's can leak a request back in between)
        local strict = mf.limit.req { rate = 1, burst = 0, dict = d }
        local ks = fresh("allow_strict")
        assert.is_true(strict:allow(ks))
        assert.are.same({ false, "rejected" }, { strict:allow(ks) })
    end)
end)

describe("mf.limit.count", function()
    it("counts limit requests a window, then the window starts again", function()
        local lim = mf.limit.count { limit = 3, window = 0.2, dict = d }
        local k = fresh("count")
        for left = 2, 0, -1 do assert.are.same({ 0, left }, { lim:incoming(k, true) }) end
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        assert.are.equal(1, lim:uncommit(k))
        assert.are.same({ 0, 0 }, { lim:incoming(k, false) })
        assert.are.same({ 0, 0 }, { lim:incoming(k, true) })
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        mf.sleep(250)
        assert.are.same({ 0, 2 }, { lim:incoming(k, true) })
    end)
end)

describe("mf.limit.conn", function()
    it("holds max + burst slots, delays the burst, gives slots back", function()
        local lim = mf.limit.conn { max = 2, burst = 1, default_conn_delay = 0.5, dict = d }
        local k = fresh("conn")
        assert.are.same({ 0, 1 }, { lim:incoming(k, true) })
        assert.are.same({ 0, 2 }, { lim:incoming(k, true) })
        assert.are.same({ 0.5, 3 }, { lim:incoming(k, false) }) -- a look
        assert.are.same({ 0.5, 3 }, { lim:incoming(k, true) })
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        assert.are.equal(2, lim:leaving(k, 0.1)) -- the unit follows the latency
        assert.are.equal(0.3, lim.unit_delay)
        assert.are.equal(1, lim:uncommit(k))
        assert.are.equal(0, lim:leaving(k))
        assert.are.equal(0, d:get(k))
    end)
end)

describe("moonflow.serve.at_end", function()
    it("says false where no request runs, raises on a non-function", function()
        local serve = require "moonflow.serve"
        assert.is_false(serve.at_end(function() end))
        raises("at_end(fn): a function expected, got string", serve.at_end, "x")
    end)
end)

describe("mf.limit over Redis", function()
    local r = mf.redis(url)

    it("req: one check a call on Redis's clock, and after a SCRIPT FLUSH", function()
        local lim = mf.limit.req { rate = 1, burst = 1, redis = url }
        local k = fresh("rreq")
        assert.are.same({ 0, 0 }, { lim:incoming(k, true) })
        local delay, excess = lim:incoming(k, true)
        assert.is_true(excess > 0.9 and excess <= 1, tostring(excess))
        assert.are.equal(delay, excess)
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        assert.is_true(lim:uncommit(k) < 0.1)
        assert.are.equal("OK", r:call("SCRIPT", "FLUSH"))
        assert.is_truthy(lim:incoming(k, true)) -- NOSCRIPT, then EVAL
        assert.is_truthy(r:call("EXISTS", "mf:limit:" .. k) == 1)
        assert.is_true(r:call("PTTL", "mf:limit:" .. k) > 0)
    end)

    it("count: the window is Redis's key's life", function()
        local lim = mf.limit.count { limit = 2, window = 0.2, redis = r }
        local k = fresh("rcount")
        assert.are.same({ 0, 1 }, { lim:incoming(k, true) })
        assert.are.same({ 0, 0 }, { lim:incoming(k, true) })
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        assert.are.equal(1, lim:uncommit(k))
        assert.are.same({ 0, 0 }, { lim:incoming(k, true) })
        mf.sleep(250)
        assert.are.same({ 0, 1 }, { lim:incoming(k, true) })
    end)

    it("conn: slots in Redis, given back by leaving", function()
        local lim = mf.limit.conn { max = 1, redis = url }
        local k = fresh("rconn")
        assert.are.same({ 0, 1 }, { lim:incoming(k, true) })
        assert.are.same({ nil, "rejected" }, { lim:incoming(k, true) })
        assert.are.equal(0, lim:leaving(k))
        assert.are.same({ 0, 1 }, { lim:incoming(k, true) })
        assert.are.equal(0, lim:leaving(k))
    end)

    it("degrades as on_redis_error says when Redis is down", function()
        local k = fresh("down")
        local loc = mf.limit.count { limit = 1, window = 10, redis = dead_url, dict = d }
        assert.are.equal("local", loc.on_redis_error)
        assert.are.same({ 0, 0 }, { loc:incoming(k, true) })      -- the dict's
        assert.are.same({ nil, "rejected" }, { loc:incoming(k, true) })
        local allow = mf.limit.req { rate = 1, redis = dead_url, on_redis_error = "allow" }
        for _ = 1, 3 do assert.are.same({ 0, 0 }, { allow:incoming(k, true) }) end
        local deny = mf.limit.conn { max = 5, redis = dead_url, on_redis_error = "deny" }
        assert.are.same({ nil, "rejected" }, { deny:incoming(k, true) })
        assert.are.same({ nil, "rejected" }, { deny:incoming(k, true) }) -- paused: no call
    end)
end)
