-- mf.sleep, mf.now, mf.debug.counts, and the rules of waiting.
local mf = require "moonflow"

describe("mf.sleep", function()
    it("parks the coroutine for at least the given milliseconds", function()
        local t0 = mf.now()
        mf.sleep(30)
        assert.is_true(mf.now() - t0 >= 30)
    end)

    it("returns nothing and accepts 0 to let other work run", function()
        assert.are.equal(0, select("#", mf.sleep(0)))
    end)

    it("raises on a negative or non-numeric duration", function()
        assert.has_error(function() mf.sleep(-1) end)
        assert.has_error(function() mf.sleep("soon") end)
    end)

    it("waits inside a plain coroutine too (its resume passes the wait up)", function()
        local t0 = mf.now()
        local ok, v = coroutine.resume(coroutine.create(function()
            mf.sleep(5)
            return "slept"
        end))
        assert.is_true(ok)
        assert.equals("slept", v)
        assert.is_true(mf.now() - t0 >= 5)
    end)

    it("raises inside require, a C call boundary, and stays usable", function()
        package.preload["spec.waits_in_require"] = function() mf.sleep(1) end
        local before = mf.debug.counts()
        local ok, err = pcall(require, "spec.waits_in_require")
        assert.is_false(ok)
        assert.matches("yield across", err)
        mf.sleep(1) -- the failed park is cleaned up; this one works
        local after = mf.debug.counts()
        assert.are.equal(before.refs, after.refs)
        assert.are.equal(before.coroutines, after.coroutines)
    end)

    it("lets a pcall-protected function wait (LuaJIT yields across pcall)", function()
        local ok, v = pcall(function() mf.sleep(1); return 42 end)
        assert.is_true(ok)
        assert.are.equal(42, v)
    end)
end)

describe("mf.now", function()
    it("returns the loop's cached time in milliseconds, never going back", function()
        local a = mf.now()
        mf.sleep(5)
        local b = mf.now()
        assert.is_number(a)
        assert.is_true(b >= a + 5)
    end)
end)

describe("mf.debug.counts", function()
    it("reports live coroutines, registry refs, timers, flows and resumes", function()
        local c = mf.debug.counts()
        for _, k in ipairs { "coroutines", "refs", "timers", "flows", "errors",
                                                  "resumes" } do
            assert.is_number(c[k], k)
        end
        assert.is_true(c.coroutines >= 1) -- this spec runs in one
    end)

    it("counts one resume per wait", function()
        local before = mf.debug.counts().resumes
        mf.sleep(1)
        assert.are.equal(before + 1, mf.debug.counts().resumes)
    end)
end)
