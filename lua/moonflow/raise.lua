-- moonflow.raise — raise(msg): raises msg at the first caller outside the
-- embedded moonflow modules, so misuse is reported where the script made
-- it. Shared by every Lua module of moonflow.
local getinfo, error = debug.getinfo, error

return function(msg)
    local level = 2
    while true do
        local info = getinfo(level, "S")
        if not info or info.source:sub(1, 11) ~= "=[moonflow]" then break end
        level = level + 1
    end
    error(msg, level)
end
