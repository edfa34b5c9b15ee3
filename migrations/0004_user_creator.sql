-- Who created a user: four eyes must not be satisfied by an account its
-- requester (or approver) made for the purpose.
ALTER TABLE users ADD COLUMN created_by UUID REFERENCES users (id);
