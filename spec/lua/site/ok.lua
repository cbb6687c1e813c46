return function(req, resp)
    resp:send("ok")
end
