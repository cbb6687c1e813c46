-- /hello
return function(req, resp)
    resp:send("Hello, moonflow!\n")
end
