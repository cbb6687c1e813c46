-- Shared dicts: the API on dicts of this process (mf.shared_dict), with
-- OpenResty's ngx.shared.DICT answers, and through `moonflow serve` with
-- two workers (spec/lua/shared_site, served by run_specs.py on
-- MF_SHARED_PORT from the copy MF_SHARED_SITE).
local mf = require "moonflow"

local MiB = 1048576

describe("mf.shared", function()
    local d = mf.shared_dict("spec_api", MiB)

    before_each(function()
        d:flush_all()
        d:flush_expired()
    end)

    it("is nil for an unknown name and one object per name", function()
        assert.is_nil(mf.shared.no_such_dict)
        assert.are.equal(d, mf.shared.spec_api)
        assert.are.equal(d, mf.shared_dict("spec_api", 2 * MiB))
        assert.are.equal(MiB, d:capacity()) -- made once, as it was
    end)

    it("keeps strings, numbers and booleans; get gives flags only when set", function()
        assert.are.same({ true, nil, false }, { d:set("s", "text", 0, 7) })
        assert.is_true((d:set("n", 2.5)))
        assert.is_true((d:set("b", false)))
        assert.is_true((d:set("e", "")))
        assert.are.same({ "text", 7 }, { d:get("s") })
        assert.are.same({ 2.5 }, { d:get("n") })
        assert.are.equal(1, select("#", d:get("n")))
        assert.is_false(d:get("b"))
        assert.are.equal("", d:get("e"))
        assert.is_nil(d:get("missing"))
        assert.are.equal(1, select("#", d:get("missing")))
        -- number keys are their strings, as in OpenResty
        assert.is_true((d:set(42, "num")))
        assert.are.equal("num", d:get("42"))
    end)

    it("deletes with a nil set and with delete", function()
        d:set("k", "v")
        assert.are.same({ true, nil, false }, { d:set("k", nil) })
        assert.is_nil(d:get("k"))
        d:set("k", "v")
        assert.is_true(d:delete("k"))
        assert.is_nil(d:get("k"))
        assert.is_true(d:delete("never there"))
    end)

    it("add answers false, 'exists' and replace false, 'not found'", function()
        assert.are.same({ false, "not found", false }, { d:replace("k", 1) })
        assert.are.same({ true, nil, false }, { d:add("k", 1) })
        assert.are.same({ false, "exists", false }, { d:add("k", 2) })
        assert.are.same({ true, nil, false }, { d:replace("k", 3) })
        assert.are.equal(3, d:get("k"))
        assert.are.same({ false, "exists", false }, { d:safe_add("k", 4) })
        assert.are.same({ true, nil, false }, { d:safe_set("k", 5) })
        assert.are.equal(5, d:get("k"))
    end)

    it("incr: not found without init, init and init_ttl, not a number", function()
        assert.are.same({ nil, "not found" }, { d:incr("n", 1) })
        assert.are.same({ 11, nil, false }, { d:incr("n", 1, 10) })
        assert.are.same({ 10.5 }, { d:incr("n", -0.5) })
        assert.are.same({ 11.5, nil, false }, { d:incr("n", 1, 100, 5) })
        assert.are.equal(0, d:ttl("n")) -- init_ttl: only for a new key
        assert.are.same({ 1, nil, false }, { d:incr("t", 1, 0, 0.05) })
        assert.is_true(d:ttl("t") > 0 and d:ttl("t") <= 0.05)
        d:set("s", "x")
        assert.are.same({ nil, "not a number" }, { d:incr("s", 1) })
        d:lpush("l", 1)
        assert.are.same({ nil, "not a number" }, { d:incr("l", 1, 0) })
    end)

    it("keeps lists: push, pop, llen, and refuses other values", function()
        assert.are.equal(1, d:lpush("l", "b"))
        assert.are.equal(2, d:lpush("l", "a"))
        assert.are.equal(3, d:rpush("l", 3))
        assert.are.equal(3, d:llen("l"))
        assert.are.same({ nil, "value is a list" }, { d:get("l") })
        assert.are.equal("a", d:lpop("l"))
        assert.are.equal(3, d:rpop("l"))
        assert.are.equal("b", d:rpop("l"))
        assert.is_nil(d:lpop("l"))
        assert.are.equal(0, d:llen("l"))
        assert.are.same({}, d:get_keys(0)) -- the last pop took the key
        d:set("s", "x")
        assert.are.same({ nil, "value not a list" }, { d:lpush("s", 1) })
        assert.are.same({ nil, "value not a list" }, { d:rpop("s") })
        assert.are.same({ nil, "value not a list" }, { d:llen("s") })
        d:rpush("l", "z")
        assert.is_true((d:set("l", "plain"))) -- a set replaces a list
        assert.are.equal("plain", d:get("l"))
    end)

    it("expires keys: ttl, expire, get_stale", function()
        d:set("k", "v", 0.05, 3)
        local ttl = d:ttl("k")
        assert.is_true(ttl > 0 and ttl <= 0.05)
        assert.is_true(d:expire("p", 1) == nil)
        assert.are.same({ nil, "not found" }, { d:expire("p", 1) })
        assert.are.same({ nil, "not found" }, { d:ttl("p") })
        d:set("p", "v", 0.05)
        assert.is_true(d:expire("p", 0))
        assert.are.equal(0, d:ttl("p"))
        -- the loop's clock may lag behind the dict's (it is cached while
        -- Lua runs): wait for the expiry itself, bounded
        for _ = 1, 200 do
            if not d:get("k") then break end
            mf.sleep(10)
        end
        assert.is_nil(d:get("k"))
        assert.are.same({ nil, "not found" }, { d:ttl("k") })
        assert.are.same({ "v", 3, true }, { d:get_stale("k") })
        assert.are.same({ "v", nil, false }, { d:get_stale("p") })
        -- add and incr with init take an expired key's place
        assert.is_true((d:add("k", "new")))
        assert.are.same({ "new", nil, false }, { d:get_stale("k") })
    end)

    it("flush_all expires everything, flush_expired frees it", function()
        d:set("a", 1)
        d:set("b", 2)
        local free = d:free_space()
        d:flush_all()
        assert.is_nil(d:get("a"))
        assert.are.same({ 2, nil, true }, { d:get_stale("b") })
        assert.are.equal(1, d:flush_expired(1))
        assert.are.equal(1, d:flush_expired())
        assert.are.equal(0, d:flush_expired())
        assert.is_true(d:free_space() > free)
    end)

    it("get_keys gives 1024 keys by default, max_count, 0 for all", function()
        for i = 1, 1500 do d:set("key" .. i, i) end
        assert.are.equal(1024, #d:get_keys())
        assert.are.equal(10, #d:get_keys(10))
        local all = d:get_keys(0)
        assert.are.equal(1500, #all)
        local seen = {}
        for _, k in ipairs(all) do seen[k] = true end
        assert.is_true(seen.key1 and seen.key1500)
    end)

    it("forces the least recently used out when full, and says so", function()
        local small = mf.shared_dict("spec_small", 8192) -- one stripe
        local value = ("v"):rep(100)
        local forced_at
        for i = 1, 200 do
            local ok, err, forcible = small:set(("key%03d"):format(i), value)
            assert.is_true(ok, err)
            if forcible then forced_at = i break end
        end
        assert.is_truthy(forced_at)
        assert.is_nil(small:get("key001")) -- the least recently used went
        assert.are.equal(value, small:get("key002"))   -- now recent
        assert.is_true((small:set("another", value)))
        assert.is_nil(small:get("key003"))            -- so key003 went next
        assert.are.equal(value, small:get("key002"))
        -- safe_set never forces a live entry out: it fills what room is left,
        -- then answers "no memory"
        local refused
        for i = 1, 200 do
            local ok, err, forcible = small:safe_set(("safe%03d"):format(i), value)
            assert.is_false(forcible)
            if not ok then refused = err break end
        end
        assert.are.equal("no memory", refused)
        assert.are.equal(value, small:get("key002"))
        -- a value bigger than the dict never fits
        assert.are.same({ false, "no memory", false }, { small:set("big", ("b"):rep(9000)) })
        assert.is_true(small:capacity() == 8192 and small:free_space() < 8192)
    end)

    it("answers alike through the FFI fast paths and the C methods", function()
        local c = require("moonflow.shared").c_methods
        if not c then return pending("the JIT is off: no FFI paths") end
        local function reset()
            d:flush_all()
            d:flush_expired()
            d:set("s", "str", 0, 9)
            d:set("n", 1.5)
            d:set("b", true)
            d:lpush("l", "x")
        end
        local function both(name, ...)
            reset()
            local fast = { pcall(d[name], d, ...) }
            reset()
            local slow = { pcall(c[name], d, ...) }
            assert.are.same(slow, fast)
            return fast
        end
        for _, k in ipairs { "s", "n", "b", "l", "missing", 42, "", {} } do
            both("get", k)
        end
        assert.are.same({ true, "str", 9 }, both("get", "s"))
        for _, args in ipairs {
            { "s", "v" }, { "k", 2 }, { "k", false }, { "s", nil }, { "k", "v", 0.5, 3 },
            { "l", 1 }, { "k", {} }, { "k", 1, -1 }, { "k", 1, 0, 1.5 }, { "", 1 },
        } do
            both("set", unpack(args, 1, 4))
        end
        for _, args in ipairs {
            { "n", 1 }, { "n", -2.5, 0 }, { "new", 1 }, { "new", 1, 10 }, { "s", 1 },
            { "l", 1, 0 }, { "n", "x" }, { "n", "2" }, { "k", 1, nil, 5 }, { {}, 1 },
        } do
            both("incr", unpack(args, 1, 4))
        end
    end)

    it("raises on misuse, naming the method and the argument", function()
        local function raises(pattern, fn, ...)
            local ok, err = pcall(fn, ...)
            assert.is_false(ok)
            assert.matches(pattern, err)
        end
        raises("dict:get%(key%): a string key expected, got table", d.get, d, {})
        raises("dict:get%(key%): a string key expected, got nil", d.get, d)
        raises("dict:set%(key%): empty key", d.set, d, "", 1)
        raises("key longer than 65535 bytes", d.set, d, ("k"):rep(65536), 1)
        raises("dict:set%(key, value%): a string, number, boolean or nil value expected, got table",
            d.set, d, "k", {})
        raises("dict:set: exptime: a number of seconds >= 0 expected", d.set, d, "k", 1, -1)
        raises("dict:add: flags: an integer", d.add, d, "k", 1, 0, 1.5)
        raises("dict:incr: value: a number expected, got string", d.incr, d, "k", "x")
        raises("dict:incr: init_ttl needs init", d.incr, d, "k", 1, nil, 5)
        raises("dict:lpush%(key, value%): a string or number value expected, got boolean",
            d.lpush, d, "l", true)
        raises("dict:get_keys%(max_count%): an integer >= 0 expected", d.get_keys, d, -1)
        raises("call it with a colon", d.get, "k")
        raises("name: an identifier", mf.shared_dict, "no-dash", MiB)
        raises("bytes: an integer from 8192", mf.shared_dict, "tiny", 100)
        -- a key of 65535 bytes is fine
        assert.is_true((d:set(("k"):rep(65535), 1)))
        assert.are.equal(1, d:get(("k"):rep(65535)))
    end)
end)

describe("mf.shared under moonflow serve with two workers", function()
    local base = "http://127.0.0.1:" .. assert(os.getenv("MF_SHARED_PORT"))
    local site = assert(os.getenv("MF_SHARED_SITE"))

    local function body(path)
        local r = assert(mf.http.get(base .. path, { timeout = 60000 }))
        assert.are.equal(200, r.status, r.body)
        return r.body
    end

    it("2 workers x 1,000,000 incr on one key give exactly 2,000,000", function()
        -- 20 connections side by side, each 10 requests of 10,000 incr:
        -- the kernel spreads the connections over both workers.
        local branches = {}
        for i = 1, 20 do
            local steps = {}
            for j = 1, 10 do
                steps[j] = mf.task.http { url = base .. "/incr?key=hot&n=10000",
                                          timeout = 120000 }
            end
            branches[i] = mf.series(steps)
        end
        local results = mf.parallel(branches):wait()
        local tags, n = {}, 0
        for _, series in ipairs(results) do
            for _, r in ipairs(series) do
                assert.are.equal(200, r.status, r.body or r.error)
                local tag = r.body:match("^(%S+) ")
                if not tags[tag] then tags[tag] = true n = n + 1 end
            end
        end
        assert.are.equal(2, n) -- both workers counted
        assert.are.equal("2000000", body("/get?dict=hits&key=hot"))
    end)

    it("keeps a dict's values across a reload of the site", function()
        assert.are.equal("kept value", body("/get?dict=kept&key=k&set=kept%20value"))
        assert.are.equal("v1", body("/version"))
        -- a changed module: a new generation of the site on every worker
        local f = assert(io.open(site .. "/lib/state.lua", "w"))
        f:write('return { version = "v2" }\n')
        f:close()
        local deadline = mf.now() + 10000
        while body("/version") ~= "v2" and mf.now() < deadline do mf.sleep(20) end
        assert.are.equal("v2", body("/version"))
        for _ = 1, 4 do -- whichever worker answers
            assert.are.equal("kept value", body("/get?dict=kept&key=k"))
        end
        assert.are.equal("no dict", body("/get?dict=nope&key=k"))
    end)
end)
