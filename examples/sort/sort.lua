-- Workflow's sort tutorial on moonflow: integers sorted on the compute
-- pool, not on the loop, by a C function the embedding program registered
-- for mf.go ("sort", in examples/embed/compute.c):
--
--   build/examples/embed examples/sort/sort.lua [N]
--
-- Sorts N pseudo-random integers (default 100000, seed 7) twice: in one
-- task, then as four parts sorted side by side (mf.parallel of
-- mf.task.go: two pool threads work at once) and merged here, as Workflow's
-- psort splits its array. Checks both orders and returns one line for each
-- and the smallest and largest numbers, which the program prints.
local mf = require "moonflow"

local n = tonumber((...) or "100000")
if not n or n < 1 or n % 1 ~= 0 then
    error("usage: embed examples/sort/sort.lua [N] (N: a count, 1 or more)", 0)
end

math.randomseed(7)
local numbers = {}
for i = 1, n do numbers[i] = math.random(-1000000, 1000000) end

local function list(text)
    local out = {}
    for word in text:gmatch("%S+") do out[#out + 1] = tonumber(word) end
    return out
end

local function check_sorted(t, how)
    assert(#t == n, how .. ": " .. #t .. " numbers came back, not " .. n)
    for i = 2, #t do
        if t[i - 1] > t[i] then error(how .. ": out of order at " .. i, 0) end
    end
    return t
end

-- One task: the whole list.
local start = mf.now()
local whole = check_sorted(list(assert(mf.go("sort", table.concat(numbers, " ")))), "one task")
local one_ms = mf.now() - start

-- Four parts side by side, then a merge of the four sorted lists.
start = mf.now()
local parts, size = {}, math.ceil(n / 4)
for p = 1, 4 do
    parts[p] = mf.task.go("sort", table.concat(numbers, " ", (p - 1) * size + 1,
                                               math.min(p * size, n)))
end
local sorted = mf.parallel(parts):wait()
local lists, at, merged = {}, {}, {}
for p = 1, 4 do
    assert(sorted[p].state == "success", sorted[p].error)
    lists[p], at[p] = list(sorted[p].value), 1
end
for i = 1, n do
    local best
    for p = 1, 4 do
        local v = lists[p][at[p]]
        if v and (not best or v < lists[best][at[best]]) then best = p end
    end
    merged[i] = lists[best][at[best]]
    at[best] = at[best] + 1
end
check_sorted(merged, "four parts")
local four_ms = mf.now() - start
for i = 1, n do assert(merged[i] == whole[i], "the two sorts differ at " .. i) end

return ("sorted %d integers in one task (%.0f ms)"):format(n, one_ms),
    ("sorted them as 4 parts side by side and merged them (%.0f ms)"):format(four_ms),
    ("smallest %d, largest %d"):format(whole[1], whole[n])
