-- Workflow's matrix multiply tutorial on moonflow: the product computed on
-- the compute pool by a C function the embedding program registered for
-- mf.go ("matmul", in examples/embed/compute.c):
--
--   build/examples/embed examples/matrix_multiply/matrix_multiply.lua
--
-- A matrix travels as text, row by row: "1 2; 3 4". Two products run side
-- by side (mf.parallel of mf.task.go), then one whose sizes do not match,
-- which the function refuses: its task error is what the script sees, as
-- Workflow's tutorial reports a failed multiplication.
local mf = require "moonflow"

local function text(m)
    local rows = {}
    for i, row in ipairs(m) do rows[i] = table.concat(row, " ") end
    return table.concat(rows, "; ")
end

local a = { { 1, 2 }, { 3, 4 } }
local b = { { 5, 6 }, { 7, 8 } }
local c = { { 1, 2, 3 } }               -- 1 x 3
local d = { { 1 }, { 0 }, { -1 } }      -- 3 x 1

local r = mf.parallel {
    mf.task.go("matmul", text(a), text(b)),
    mf.task.go("matmul", text(c), text(d)),
}:wait()
local bad, err = mf.go("matmul", text(a), text(c)) -- 2 x 2 times 1 x 3

return "[" .. text(a) .. "] x [" .. text(b) .. "] = [" .. r[1].value .. "]",
    "[" .. text(c) .. "] x [" .. text(d) .. "] = [" .. r[2].value .. "]",
    "[" .. text(a) .. "] x [" .. text(c) .. "]: " .. tostring(bad) .. ", " .. err
