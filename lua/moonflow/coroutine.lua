-- moonflow.coroutine — coroutine.resume and coroutine.wrap that let a
-- plain coroutine wait on moonflow's calls (mf.sleep, tasks, queues ...),
-- as OpenResty lets them. Installed in the global coroutine table by
-- require "moonflow".
--
-- A wait inside a plain coroutine parks the moonflow coroutine at the root
-- of the resume chain: the waiting call yields its plain coroutine (the C
-- side marks it: moonflow.core's nested_take), each resume below passes
-- the yield up (marking its own coroutine when it is plain too), the root
-- parks; the wait's results come back down the same chain, as the results
-- of each yield, into the waiting call. A plain coroutine.yield is not
-- marked and behaves as always. Coroutines resumed through these wrappers
-- are held in a weak table while they run, which is how the C side tells
-- them from a coroutine resumed by other means (a wait there raises).
local core = require "moonflow.core"

local raw_create, raw_resume = coroutine.create, coroutine.resume
local raw_yield, running = coroutine.yield, coroutine.running
local take, mark = core.nested_take, core.nested_mark
local error, setmetatable = error, setmetatable

local managed = setmetatable({}, { __mode = "k" })
debug.getregistry()["moonflow.nested"] = managed

local pass

-- Resumes co (marked as managed while it runs) with the values given.
local function resume(co, ...)
    managed[co] = true
    return pass(co, raw_resume(co, ...))
end

-- What co's resume gave: a wait of co's is passed up, its results passed
-- back down; anything else goes to the caller.
function pass(co, ok, ...)
    managed[co] = nil
    if ok and take(co) then
        local me = running()
        if managed[me] then mark(me) end
        return resume(co, raw_yield())
    end
    return ok, ...
end

local function unwrap(ok, ...)
    if not ok then error((...), 0) end
    return ...
end

coroutine.resume = resume

function coroutine.wrap(f)
    local co = raw_create(f)
    return function(...) return unwrap(resume(co, ...)) end
end

return coroutine
