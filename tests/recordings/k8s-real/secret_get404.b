{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"secrets \"nothing-here\" not found","reason":"NotFound","details":{"name":"nothing-here","kind":"secrets"},"code":404}
