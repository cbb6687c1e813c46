-- req and resp belong to their handler's coroutine (and the flow callbacks
-- it waits on): a background timer, or anything after the request, cannot
-- use them.
--   /owner?step=during   a timer tries resp while the handler still waits
--   /owner?step=keep     leaves a timer that tries resp after the answer
--   /owner?step=report   what that late timer saw
--   /owner?step=callback a flow callback sets a header on resp
--   /owner?step=fresh&v= answers its own query (objects are reused per
--                        coroutine thread: nothing of an earlier request
--                        may show)
local mf = require "moonflow"

local late -- what the timer of the last step=keep saw

local function try(resp)
    local ok, err = pcall(resp.send, resp, "from a timer")
    return tostring(ok) .. " " .. tostring(err)
end

return function(req, resp)
    local step = req.query.step
    if step == "during" then
        local seen
        mf.timer.at(1, function() seen = try(resp) end)
        mf.sleep(50)
        resp:send(seen or "timer did not run")
    elseif step == "keep" then
        late = nil
        mf.timer.at(20, function()
            late = try(resp) .. " status=" .. tostring(resp.status) ..
                " sent=" .. tostring(resp.sent)
        end)
        resp:send("kept")
    elseif step == "report" then
        resp:send(late or "timer did not run")
    elseif step == "callback" then
        mf.series {
            mf.task.timer(1, {
                callback = function() resp:set_header("X-Callback", "yes") end,
            }),
        }:wait()
        resp:send("after callback")
    else
        resp:send(tostring(req.query.v) .. " " .. tostring(req.body == ""))
    end
end
