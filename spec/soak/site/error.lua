-- /error: a Lua error, answered 500 and logged (an injected error).
local function explode()
    error("boom from the soak")
end

return function(req, resp)
    explode()
end
