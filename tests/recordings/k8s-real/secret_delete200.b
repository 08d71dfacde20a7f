{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"probe-record","kind":"secrets","uid":"356e0e44-2a25-40c8-9256-26ebc2f779b9"}}
